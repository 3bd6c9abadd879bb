"""The proxy process's life: start, serve until SIGTERM or SIGINT, drain and stop; SIGHUP reloads. What `run` and
`demo` run once the configuration is checked (insync_proxy/cli)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import typing

from insync_proxy.proxy.config.broker_ports import bootstrap_host
from insync_proxy.proxy.config.settings import ProxyConfig


async def serve(config: ProxyConfig, ready_message: str | None = None,
                load: typing.Callable[[], ProxyConfig] | None = None, config_file: str | None = None,
                stop_requested: typing.Callable[[], bool] | None = None) -> bool:
    """Run the proxy until SIGTERM or SIGINT, then drain and stop; SIGHUP reloads (`load` re-reads the settings),
    and so does a change of `config_file`'s content (seen every tls_reload_seconds). True when the proxy had
    started (and printed `ready_message`), False when a signal stopped its start.

    `stop_requested` tells of a stop asked before serve() took the signals (a Ctrl-C its caller recorded): then
    nothing starts. The proxy logs "listening" once its ports are bound and "ready" when /readyz turns ready.
    """
    from insync_proxy.proxy.observability.logs import flush_all
    from insync_proxy.proxy.server import InsyncProxy

    proxy = InsyncProxy(config, load=load, config_file=config_file)
    # The stop signals are taken before the start: /readyz may answer 200 while the start still runs, and a
    # start can wait a whole control timeout on a silent broker. A SIGTERM then (a rollout, a test) ends the
    # start and drains: exit 0, not the signal's default (killed).
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if stop_requested is not None and stop_requested():
        return False
    starting = loop.create_task(proxy.start())
    stopping = loop.create_task(stop.wait())
    await asyncio.wait((starting, stopping), return_when=asyncio.FIRST_COMPLETED)
    started = starting.done()
    if not started:
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
    else:
        if starting.exception() is not None:
            stopping.cancel()
        starting.result()  # a failed start raises here, as before
        # What the start made (modules, settings, listeners) lives as long as the process: out of the garbage
        # collector's way, a full collection walks only what traffic made (measured: a 3,000-topic Metadata
        # answer's worst hold of the loop 24 -> 2.3 ms; benchmarks/metadata_bench.py freezes the same way).
        gc.collect()
        gc.freeze()
        loop.add_signal_handler(signal.SIGHUP, lambda: proxy.reloads.reload("SIGHUP"))
        if ready_message:
            print(ready_message.format(bootstrap=f"{bootstrap_host(config.advertised_host, config.bind_host)}:"
                                                 f"{proxy.bootstrap_port}",
                                       admin=proxy.admin.url), flush=True)
    await stopping
    try:
        await proxy.stop()
    finally:
        flush_all()  # repeated lines held back since their last summary: counted before the process exits
    return started

"""The behaviours' order is declared once (proxy/behaviours/order.py): every behaviour has its place, the server
builds its registry through it, and a partial registry keeps it."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

from insync_proxy.proxy.behaviours.addresses import AddressRewrite
from insync_proxy.proxy.behaviours.api_versions import ApiVersionsNegotiation
from insync_proxy.proxy.behaviours.order import ORDER, in_order
from insync_proxy.proxy.datapath.exchange import BehaviourBase
from tests.source_tree import ROOT


def _behaviour_classes() -> set[type]:
    found: set[type] = set()
    for path in (ROOT / "proxy" / "behaviours").glob("*.py"):
        module = importlib.import_module(f"insync_proxy.proxy.behaviours.{path.stem}")
        found.update(cls for _, cls in inspect.getmembers(module, inspect.isclass)
                     if issubclass(cls, BehaviourBase) and cls is not BehaviourBase and cls.__module__ == module.__name__)
    return found


def test_every_behaviour_has_one_place() -> None:
    assert set(ORDER) == _behaviour_classes()
    assert len(ORDER) == len(set(ORDER))


def test_the_server_registers_them_through_the_order() -> None:
    tree = ast.parse((ROOT / "proxy" / "server.py").read_text())
    method = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_behaviours")
    returns = [n for n in ast.walk(method) if isinstance(n, ast.Return)]
    assert returns and all(isinstance(r.value, ast.Call) and getattr(r.value.func, "id", "") == "in_order"
                           for r in returns)


def test_a_partial_registry_keeps_the_order_and_refuses_strangers() -> None:
    rewrite, negotiation = AddressRewrite(), ApiVersionsNegotiation()
    assert ORDER.index(ApiVersionsNegotiation) < ORDER.index(AddressRewrite)
    assert in_order([rewrite, negotiation]) == [negotiation, rewrite]

    class Stranger(BehaviourBase):
        pass

    with pytest.raises(ValueError, match="Stranger has no place"):
        in_order([Stranger()])
    with pytest.raises(ValueError, match="two AddressRewrite"):
        in_order([rewrite, AddressRewrite()])

// Starts Kroxylicious (io.kroxylicious:kroxylicious-runtime, from Maven Central) from a YAML config file for
// benchmarks/peers_bench.py. Maven Central carries the runtime but not the kroxylicious-app launcher, so this
// is the benchmark's own: parse the file with the runtime's public ConfigParser, start a KafkaProxy, print
// "ready" on stdout, and run until the process is terminated (SIGTERM shuts the proxy down).
//
//   javac -cp 'lib/*' -d classes BenchKroxylicious.java
//   java -cp 'classes:lib/*' BenchKroxylicious proxy.yaml

import java.nio.file.Files;
import java.nio.file.Path;

import io.kroxylicious.proxy.KafkaProxy;
import io.kroxylicious.proxy.config.ConfigParser;
import io.kroxylicious.proxy.config.Configuration;
import io.kroxylicious.proxy.internal.config.Features;

public final class BenchKroxylicious {
    private BenchKroxylicious() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: BenchKroxylicious CONFIG.yaml");
            System.exit(2);
        }
        ConfigParser parser = new ConfigParser();
        Configuration config = parser.parseConfiguration(Files.readString(Path.of(args[0])));
        KafkaProxy proxy = new KafkaProxy(parser, config, Features.defaultFeatures());
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                proxy.shutdown();
            }
            catch (RuntimeException e) {
                // already stopping
            }
        }));
        proxy.startup();
        System.out.println("ready");
        System.out.flush();
        proxy.block();
    }
}

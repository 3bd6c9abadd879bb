import java.io.FileInputStream;
import java.io.InputStream;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.locks.LockSupport;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Kafka's Java producer, for the added latency of the scenario runner (benchmarks/scenario/latency.py, issue 39).
 *
 *   LatencyProducer BOOTSTRAP TOPIC PARTITION RATE SECONDS [PROPERTIES_FILE]
 *
 * RATE 0: closed loop, one record at a time (send, wait for its acknowledgement) for SECONDS; prints
 * "MAX <records per second>" and exits: the most this producer, configured for latency (acks=all,
 * linger.ms=0, one request in flight), can acknowledge.
 *
 * RATE > 0: open loop at RATE records a second for SECONDS (0: until killed). A record's latency runs from the
 * moment it was due to be sent (not when send() returned: a stalled producer is not excused) to its
 * acknowledgement. Once a second it prints one line:
 *
 *   H <acknowledged> <errors> <bucket>:<count> ...
 *
 * where bucket b holds latencies in [1.02^b, 1.02^(b+1)) microseconds (2% wide).
 */
public final class LatencyProducer {
    static final double BUCKET_BASE = Math.log(1.02);
    static final int BUCKETS = 1200;

    static int bucket(long micros) {
        if (micros < 1) {
            return 0;
        }
        return (int) Math.min(BUCKETS - 1, Math.floor(Math.log(micros) / BUCKET_BASE));
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            System.err.println("usage: LatencyProducer BOOTSTRAP TOPIC PARTITION RATE SECONDS [PROPERTIES_FILE]");
            System.exit(2);
        }
        String bootstrap = args[0];
        String topic = args[1];
        int partition = Integer.parseInt(args[2]);
        double rate = Double.parseDouble(args[3]);
        double seconds = Double.parseDouble(args[4]);
        Properties props = new Properties();
        if (args.length > 5) {
            try (InputStream in = new FileInputStream(args[5])) {
                props.load(in);
            }
        }
        props.put("bootstrap.servers", bootstrap);
        props.putIfAbsent("acks", "all");
        props.putIfAbsent("linger.ms", "0");
        props.putIfAbsent("enable.idempotence", "false");
        props.putIfAbsent("max.in.flight.requests.per.connection", "1");
        props.putIfAbsent("delivery.timeout.ms", "60000");
        props.putIfAbsent("request.timeout.ms", "30000");
        byte[] value = new byte[100];
        try (KafkaProducer<byte[], byte[]> producer =
                     new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
            if (rate <= 0) {
                closedLoop(producer, topic, partition, value, seconds);
            } else {
                openLoop(producer, topic, partition, value, rate, seconds);
            }
        }
    }

    static void closedLoop(KafkaProducer<byte[], byte[]> producer, String topic, int partition, byte[] value,
                           double seconds) throws Exception {
        // The first records pay for connections and metadata: not counted.
        for (int i = 0; i < 20; i++) {
            producer.send(new ProducerRecord<>(topic, partition, null, value)).get(30, TimeUnit.SECONDS);
        }
        long start = System.nanoTime();
        long end = start + (long) (seconds * 1e9);
        long n = 0;
        while (System.nanoTime() < end) {
            producer.send(new ProducerRecord<>(topic, partition, null, value)).get(30, TimeUnit.SECONDS);
            n++;
        }
        System.out.println("MAX " + (n / ((System.nanoTime() - start) / 1e9)));
        System.out.flush();
    }

    static void openLoop(KafkaProducer<byte[], byte[]> producer, String topic, int partition, byte[] value,
                         double rate, double seconds) {
        AtomicLongArray counts = new AtomicLongArray(BUCKETS);
        AtomicLong acknowledged = new AtomicLong();
        AtomicLong errors = new AtomicLong();
        Thread printer = new Thread(() -> {
            long next = System.nanoTime();
            while (!Thread.currentThread().isInterrupted()) {
                next += 1_000_000_000L;
                LockSupport.parkNanos(Math.max(0, next - System.nanoTime()));
                StringBuilder line = new StringBuilder("H ");
                line.append(acknowledged.getAndSet(0)).append(' ').append(errors.getAndSet(0));
                for (int b = 0; b < BUCKETS; b++) {
                    long c = counts.getAndSet(b, 0);
                    if (c != 0) {
                        line.append(' ').append(b).append(':').append(c);
                    }
                }
                System.out.println(line);
                System.out.flush();
            }
        }, "latency-printer");
        printer.setDaemon(true);
        printer.start();
        long interval = (long) (1e9 / rate);
        long start = System.nanoTime();
        long end = seconds > 0 ? start + (long) (seconds * 1e9) : Long.MAX_VALUE;
        for (long i = 0; ; i++) {
            long due = start + i * interval;
            if (due >= end) {
                break;
            }
            long wait = due - System.nanoTime();
            if (wait > 0) {
                LockSupport.parkNanos(wait);
            }
            producer.send(new ProducerRecord<>(topic, partition, null, value), (metadata, exception) -> {
                if (exception != null) {
                    errors.incrementAndGet();
                } else {
                    acknowledged.incrementAndGet();
                    counts.incrementAndGet(bucket((System.nanoTime() - due) / 1000));
                }
            });
        }
        producer.flush();
    }
}

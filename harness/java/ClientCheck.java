// The Java client through insync-proxy: compiled by the test suite against kafka-clients from Maven Central.
// Usage: ClientCheck roundtrip|transactions|keyless <bootstrap> <topic> [count]
//        ClientCheck produce-consume <bootstrap> <topic> <count> <acks> <client.properties>
//        ClientCheck produce-for <bootstrap> <topic> <seconds> <warmup seconds> [<ms between records>, 2]
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class ClientCheck {
    static Properties producerProps(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "all");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        return p;
    }

    static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, String group, boolean readCommitted) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("auto.offset.reset", "earliest");
        c.put("enable.auto.commit", "false");
        if (readCommitted) c.put("isolation.level", "read_committed");
        c.put("key.deserializer", ByteArrayDeserializer.class.getName());
        c.put("value.deserializer", ByteArrayDeserializer.class.getName());
        return new KafkaConsumer<>(c);
    }

    static List<byte[]> readUntil(KafkaConsumer<byte[], byte[]> consumer, int expected, byte[] marker) {
        List<byte[]> values = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 90_000;
        while (System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                values.add(r.value());
                if (marker != null && Arrays.equals(r.value(), marker)) return values;
            }
            if (marker == null && values.size() >= expected) return values;
        }
        throw new IllegalStateException("timed out with " + values.size() + " records");
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], topic = args[2];
        switch (mode) {
            case "roundtrip": roundtrip(bootstrap, topic); break;
            case "transactions": transactions(bootstrap, topic); break;
            case "keyless": keyless(bootstrap, topic, Integer.parseInt(args[3])); break;
            case "produce-consume": produceConsume(bootstrap, topic, Integer.parseInt(args[3]), args[4], args[5]); break;
            case "produce-for": produceFor(bootstrap, topic, Integer.parseInt(args[3]), Integer.parseInt(args[4]),
                                           args.length > 5 ? Integer.parseInt(args[5]) : 2); break;
            default: throw new IllegalArgumentException(mode);
        }
    }

    static void roundtrip(String bootstrap, String topic) throws Exception {
        Properties a = new Properties();
        a.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(a)) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 3))).all().get(60, TimeUnit.SECONDS);
            for (Node n : admin.describeCluster().nodes().get(30, TimeUnit.SECONDS))
                System.out.println("broker " + n.id() + " " + n.host() + ":" + n.port());
            Set<String> expected = new HashSet<>();
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps(bootstrap))) {
                Random random = new Random(42);
                for (int i = 0; i < 200; i++) {
                    byte[] value = new byte[100 + i * 7];
                    random.nextBytes(value);
                    expected.add(Base64.getEncoder().encodeToString(value));
                    producer.send(new ProducerRecord<>(topic, ("k" + i).getBytes(), value)).get(60, TimeUnit.SECONDS);
                }
            }
            try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, "java-" + topic, false)) {
                consumer.subscribe(List.of(topic));
                Set<String> got = new HashSet<>();
                for (byte[] v : readUntil(consumer, 200, null)) got.add(Base64.getEncoder().encodeToString(v));
                consumer.commitSync();
                long committed = 0;
                for (int p = 0; p < 3; p++) {
                    OffsetAndMetadata o = consumer.committed(Set.of(new TopicPartition(topic, p))).get(new TopicPartition(topic, p));
                    committed += o == null ? 0 : o.offset();
                }
                if (!got.equals(expected)) throw new IllegalStateException("records differ");
                if (committed != 200) throw new IllegalStateException("committed " + committed);
            }
            admin.deleteTopics(List.of(topic)).all().get(60, TimeUnit.SECONDS);
        }
        System.out.println("OK roundtrip");
    }

    static void transactions(String bootstrap, String topic) throws Exception {
        Properties p = producerProps(bootstrap);
        p.put("transactional.id", "java-tx-" + topic);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < 10; i++) producer.send(new ProducerRecord<>(topic, ("committed-" + i).getBytes()));
            producer.commitTransaction();
            producer.beginTransaction();
            for (int i = 0; i < 10; i++) producer.send(new ProducerRecord<>(topic, ("aborted-" + i).getBytes()));
            producer.flush();
            producer.abortTransaction();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, "marker".getBytes()));
            producer.commitTransaction();
        }
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, "java-tx-" + topic, true)) {
            consumer.subscribe(List.of(topic));
            List<byte[]> values = readUntil(consumer, 0, "marker".getBytes());
            List<String> got = new ArrayList<>();
            for (byte[] v : values) got.add(new String(v));
            List<String> want = new ArrayList<>();
            for (int i = 0; i < 10; i++) want.add("committed-" + i);
            want.add("marker");
            if (!got.equals(want)) throw new IllegalStateException("read_committed saw " + got);
        }
        System.out.println("OK transactions");
    }

    // Produce `count` keyed records with `acks` and read them back, with security settings (security.protocol,
    // sasl.*, ssl.*) from a properties file: no topic is created or deleted (ACLs may not allow it).
    static void produceConsume(String bootstrap, String topic, int count, String acks, String propertiesFile)
            throws Exception {
        Properties security = new Properties();
        try (java.io.FileInputStream in = new java.io.FileInputStream(propertiesFile)) { security.load(in); }
        Properties p = producerProps(bootstrap);
        p.putAll(security);
        p.put("acks", acks);
        if (!acks.equals("all") && !acks.equals("-1")) p.put("enable.idempotence", "false");  // needs acks=all
        Set<String> expected = new HashSet<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                String value = "java-" + acks + "-" + i;
                expected.add(value);
                futures.add(producer.send(new ProducerRecord<>(topic, ("k" + i).getBytes(), value.getBytes())));
            }
            for (Future<RecordMetadata> f : futures) f.get(120, TimeUnit.SECONDS);
        }
        Properties c = new Properties();
        c.putAll(security);
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", "java-" + topic);
        c.put("auto.offset.reset", "earliest");
        c.put("enable.auto.commit", "false");
        c.put("key.deserializer", ByteArrayDeserializer.class.getName());
        c.put("value.deserializer", ByteArrayDeserializer.class.getName());
        Set<String> got = new HashSet<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            for (byte[] v : readUntil(consumer, count, null)) got.add(new String(v));
            consumer.commitSync();
        }
        if (!got.containsAll(expected)) throw new IllegalStateException("missing records: " + expected.size()
            + " produced, " + got.size() + " read");
        System.out.println("OK produce-consume " + count);
    }

    static double producerMetric(KafkaProducer<byte[], byte[]> producer, String name) {
        for (Map.Entry<org.apache.kafka.common.MetricName, ? extends org.apache.kafka.common.Metric> e
                : producer.metrics().entrySet())
            if (e.getKey().group().equals("producer-metrics") && e.getKey().name().equals(name))
                return ((Number) e.getValue().metricValue()).doubleValue();
        return -1;
    }

    // Produces without pause (acks=all, one record every 2 ms) for `seconds` or until a line arrives on stdin;
    // prints what it sent, the send
    // errors, and the connections the producer opened and closed after the first `warmup` seconds (reconnects).
    static void produceFor(String bootstrap, String topic, int seconds, int warmup, int intervalMs) throws Exception {
        Properties p = producerProps(bootstrap);
        p.put("linger.ms", "5");
        p.put("delivery.timeout.ms", "120000");
        p.put("connections.max.idle.ms", "3600000");  // no idle close during a long run: every close is a reconnect
        java.util.concurrent.atomic.AtomicLong errors = new java.util.concurrent.atomic.AtomicLong();
        java.util.concurrent.atomic.AtomicLong acked = new java.util.concurrent.atomic.AtomicLong();
        long sent = 0;
        double connectsAtWarmup = -1, closesAtWarmup = -1;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            long start = System.currentTimeMillis(), end = start + seconds * 1000L;
            while (System.currentTimeMillis() < end && System.in.available() == 0) {  // a line on stdin: stop
                if (connectsAtWarmup < 0 && System.currentTimeMillis() >= start + warmup * 1000L) {
                    connectsAtWarmup = producerMetric(producer, "connection-creation-total");
                    closesAtWarmup = producerMetric(producer, "connection-close-total");
                    System.out.println("WARM");
                    System.out.flush();
                }
                producer.send(new ProducerRecord<>(topic, ("k" + sent).getBytes(), ("java-" + sent).getBytes()),
                    (metadata, exception) -> {
                        if (exception != null) {
                            errors.incrementAndGet();
                            System.err.println("send error: " + exception);
                        } else acked.incrementAndGet();
                    });
                sent++;
                Thread.sleep(intervalMs);
            }
            producer.flush();
            System.out.println("sent=" + sent + " acked=" + acked.get() + " errors=" + errors.get()
                + " connects=" + (long) (producerMetric(producer, "connection-creation-total") - connectsAtWarmup)
                + " closes=" + (long) (producerMetric(producer, "connection-close-total") - closesAtWarmup));
        }
    }

    static void keyless(String bootstrap, String topic, int count) throws Exception {
        Properties p = producerProps(bootstrap);
        p.put("linger.ms", "0");
        p.put("batch.size", "1");  // one record per batch: the partitioner chooses for each
        p.put("metadata.max.age.ms", "1000");
        Map<Integer, Integer> perPartition = new TreeMap<>();
        int failed = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < count; i++)
                futures.add(producer.send(new ProducerRecord<>(topic, ("java-" + i).getBytes())));
            for (Future<RecordMetadata> f : futures) {
                try {
                    RecordMetadata m = f.get(120, TimeUnit.SECONDS);
                    perPartition.merge(m.partition(), 1, Integer::sum);
                } catch (ExecutionException e) {
                    failed++;
                }
            }
        }
        for (Map.Entry<Integer, Integer> e : perPartition.entrySet())
            System.out.println("partition " + e.getKey() + " " + e.getValue());
        System.out.println("failed " + failed);
    }
}

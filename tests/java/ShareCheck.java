// A share-group consumer (KIP-932, Kafka 4.x) and the metadata quorum through insync-proxy; compiled by the
// test suite against kafka-clients from Maven Central.
// Usage: ShareCheck consume <bootstrap> <topic> <count> | ShareCheck quorum <bootstrap>
import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.*;

public class ShareCheck {
    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "consume": consume(args[1], args[2], Integer.parseInt(args[3])); break;
            case "quorum": quorum(args[1]); break;
            default: throw new IllegalArgumentException(args[0]);
        }
    }

    static Admin admin(String bootstrap) {
        Properties a = new Properties();
        a.put("bootstrap.servers", bootstrap);
        return Admin.create(a);
    }

    // Produces `count` distinct values, reads them all with a KafkaShareConsumer (explicit acknowledgement,
    // so ShareAcknowledge goes on the wire), then waits until the group's lag is 0 on every partition.
    static void consume(String bootstrap, String topic, int count) throws Exception {
        String group = "share-" + topic;
        try (Admin admin = admin(bootstrap)) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 3))).all().get(60, TimeUnit.SECONDS);
            // A share group starts at the latest offset unless told otherwise.
            admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.GROUP, group), List.of(
                new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET))))
                .all().get(60, TimeUnit.SECONDS);
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("acks", "all");
            p.put("key.serializer", StringSerializer.class.getName());
            p.put("value.serializer", StringSerializer.class.getName());
            Set<String> expected = new HashSet<>();
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                for (int i = 0; i < count; i++) {
                    String value = "share-" + i;
                    expected.add(value);
                    producer.send(new ProducerRecord<>(topic, "k" + i, value));
                }
                producer.flush();
            }
            Properties c = new Properties();
            c.put("bootstrap.servers", bootstrap);
            c.put("group.id", group);
            c.put("share.acknowledgement.mode", "explicit");
            c.put("key.deserializer", StringDeserializer.class.getName());
            c.put("value.deserializer", StringDeserializer.class.getName());
            Set<String> got = new HashSet<>();
            int deliveries = 0;
            try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(c)) {
                consumer.subscribe(List.of(topic));
                long deadline = System.currentTimeMillis() + 120_000;
                while (!got.containsAll(expected)) {
                    if (System.currentTimeMillis() > deadline)
                        throw new IllegalStateException("timed out with " + got.size() + " of " + count + " records");
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                        got.add(r.value());
                        deliveries++;
                        consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                    }
                    consumer.commitSync(Duration.ofSeconds(30)).forEach((tp, error) -> error.ifPresent(e -> {
                        throw new IllegalStateException("acknowledgement of " + tp + " failed", e);
                    }));
                }
            }
            System.out.println("consumed " + got.size() + " of " + count + " in " + deliveries + " deliveries");
            long deadline = System.currentTimeMillis() + 60_000;
            while (true) {
                Map<TopicPartition, SharePartitionOffsetInfo> offsets = admin
                    .listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec()))
                    .partitionsToOffsetInfo(group).get(30, TimeUnit.SECONDS);
                long lag = 0;
                for (SharePartitionOffsetInfo info : offsets.values()) lag += info.lag().orElse(-1L);
                if (offsets.size() == 3 && lag == 0) {
                    System.out.println("lag 0 on " + offsets.size() + " partitions");
                    break;
                }
                if (System.currentTimeMillis() > deadline)
                    throw new IllegalStateException("share group lag still " + lag + ": " + offsets);
                Thread.sleep(200);
            }
        }
    }

    static void quorum(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            QuorumInfo info = admin.describeMetadataQuorum().quorumInfo().get(60, TimeUnit.SECONDS);
            System.out.println("leader " + info.leaderId());
            for (QuorumInfo.Node node : info.nodes().values())
                for (RaftVoterEndpoint ep : node.endpoints())
                    System.out.println("node " + node.nodeId() + " " + ep.name() + " " + ep.host() + ":" + ep.port());
        }
    }
}

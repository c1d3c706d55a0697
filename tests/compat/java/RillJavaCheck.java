// Drives Apache Kafka's Java client (the one Spark uses) against a broker and prints what it saw in a compact,
// deterministic form that the Python test compares line for line.
//
//   java RillJavaCheck BOOTSTRAP admin TOPIC
//   java RillJavaCheck BOOTSTRAP produce TOPIC PARTITIONS CODEC N SEED
//   java RillJavaCheck BOOTSTRAP consume TOPIC N
//   java RillJavaCheck BOOTSTRAP edges TOPIC TIMESTAMP
//   java RillJavaCheck BOOTSTRAP group TOPIC GROUP ASSIGNOR N
//
// Records follow the generator of tests/compat/_data.py: record i has key "key-{i%97}-{i}", value
// "value-{i}-" + sha256hex("{seed}-{i}") repeated 1 + i%7 times, headers h1="v{i}" and trace=first 8 hex digits,
// timestamp 1700000000000 + i, and goes to partition i % PARTITIONS.
//
// Record lines: "rec PARTITION OFFSET TIMESTAMP TYPE KEY VALUE HEADERS" with KEY and VALUE in hex ("-" for null)
// and HEADERS as name=hex pairs joined by ",". Any mismatch or exception ends the program with status 1 and a line
// starting with "FAIL:" on stderr.

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DeletedRecords;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class RillJavaCheck {
    static final long BASE_TS = 1_700_000_000_000L;
    static final Duration WAIT = Duration.ofSeconds(30);

    static final class Failure extends RuntimeException {
        Failure(String message) {
            super(message);
        }
    }

    public static void main(String[] args) {
        try {
            if (args.length < 2) {
                throw new Failure("usage: RillJavaCheck BOOTSTRAP admin|produce|consume|group ARGS...");
            }
            String bootstrap = args[0];
            switch (args[1]) {
                case "admin" -> admin(bootstrap, args[2]);
                case "produce" -> produce(bootstrap, args[2], Integer.parseInt(args[3]), args[4],
                        Integer.parseInt(args[5]), args[6]);
                case "consume" -> consume(bootstrap, args[2], Integer.parseInt(args[3]));
                case "record-errors" -> recordErrors(bootstrap, args[2], Integer.parseInt(args[3]), args[4]);
                case "edges" -> edges(bootstrap, args[2], Long.parseLong(args[3]));
                case "group" -> group(bootstrap, args[2], args[3], args[4], Integer.parseInt(args[5]));
                default -> throw new Failure("unknown scenario " + args[1]);
            }
            System.out.flush();
            System.exit(0);
        } catch (Throwable t) {
            System.out.flush();
            Throwable cause = t instanceof ExecutionException && t.getCause() != null ? t.getCause() : t;
            System.err.println("FAIL: " + cause);
            if (!(cause instanceof Failure)) {
                cause.printStackTrace(System.err);
            }
            System.err.flush();
            System.exit(1);
        }
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new Failure(what);
        }
    }

    static void out(String line) {
        System.out.println(line);
    }

    // ------------------------------------------------------------------ records

    record Rec(byte[] key, byte[] value, List<Header> headers, long timestamp) {
    }

    static Rec makeRecord(String seed, int i) throws Exception {
        MessageDigest sha = MessageDigest.getInstance("SHA-256");
        String digest = hex(sha.digest((seed + "-" + i).getBytes(StandardCharsets.UTF_8)));
        String value = "value-" + i + "-" + digest.repeat(1 + i % 7);
        List<Header> headers = List.of(
                new RecordHeader("h1", ("v" + i).getBytes(StandardCharsets.UTF_8)),
                new RecordHeader("trace", digest.substring(0, 8).getBytes(StandardCharsets.UTF_8)));
        return new Rec(("key-" + (i % 97) + "-" + i).getBytes(StandardCharsets.UTF_8),
                value.getBytes(StandardCharsets.UTF_8), headers, BASE_TS + i);
    }

    static final char[] HEX = "0123456789abcdef".toCharArray();

    static String hex(byte[] bytes) {
        if (bytes == null) {
            return "-";
        }
        char[] out = new char[bytes.length * 2];
        for (int i = 0; i < bytes.length; i++) {
            out[2 * i] = HEX[(bytes[i] >> 4) & 0xf];
            out[2 * i + 1] = HEX[bytes[i] & 0xf];
        }
        return new String(out);
    }

    static String line(ConsumerRecord<byte[], byte[]> r) {
        StringBuilder hs = new StringBuilder();
        for (Header h : r.headers()) {
            if (hs.length() > 0) {
                hs.append(',');
            }
            hs.append(h.key()).append('=').append(hex(h.value()));
        }
        return "rec " + r.partition() + " " + r.offset() + " " + r.timestamp() + " " + r.timestampType().id + " "
                + hex(r.key()) + " " + hex(r.value()) + " " + (hs.length() == 0 ? "-" : hs);
    }

    // ------------------------------------------------------------------ clients

    static Properties common(String bootstrap, String clientId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", clientId);
        p.put("request.timeout.ms", "20000");
        p.put("default.api.timeout.ms", "30000");
        return p;
    }

    static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, String clientId, Properties extra) {
        Properties p = common(bootstrap, clientId);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.putAll(extra);
        return new KafkaConsumer<>(p);
    }

    static List<TopicPartition> partitionsOf(KafkaConsumer<byte[], byte[]> c, String topic) {
        List<TopicPartition> tps = new ArrayList<>();
        for (var info : c.partitionsFor(topic, WAIT)) {
            tps.add(new TopicPartition(topic, info.partition()));
        }
        tps.sort((a, b) -> Integer.compare(a.partition(), b.partition()));
        check(!tps.isEmpty(), "topic " + topic + " has no partitions");
        return tps;
    }

    // ------------------------------------------------------------------ admin

    static void admin(String bootstrap, String topic) throws Exception {
        Properties p = common(bootstrap, "rill-java-admin");
        try (Admin admin = Admin.create(p)) {
            DescribeClusterResult cluster = admin.describeCluster();
            int nodes = cluster.nodes().get().size();
            out("cluster nodes=" + nodes + " controller=" + (cluster.controller().get() != null)
                    + " clusterId=" + (cluster.clusterId().get() != null));

            Map<String, String> configs = new TreeMap<>();
            configs.put("retention.ms", "3600000");
            configs.put("cleanup.policy", "delete");
            configs.put("max.message.bytes", "2000000");
            NewTopic newTopic = new NewTopic(topic, 3, (short) 1).configs(configs);
            var created = admin.createTopics(List.of(newTopic));
            created.all().get();
            out("created " + topic + " partitions=" + created.numPartitions(topic).get()
                    + " replicationFactor=" + created.replicationFactor(topic).get()
                    + " topicId=" + !created.topicId(topic).get().toString().isEmpty());
            try {
                admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get();
                throw new Failure("creating " + topic + " twice succeeded");
            } catch (ExecutionException e) {
                check(e.getCause() instanceof TopicExistsException, "second create: " + e.getCause());
                out("create again: TopicExistsException");
            }

            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            StringBuilder parts = new StringBuilder();
            for (TopicPartitionInfo info : d.partitions()) {
                check(info.leader() != null, "partition " + info.partition() + " has no leader");
                parts.append(" p").append(info.partition()).append(":replicas=").append(info.replicas().size())
                        .append(",isr=").append(info.isr().size());
            }
            out("describe " + d.name() + " internal=" + d.isInternal() + parts);
            check(d.topicId().equals(created.topicId(topic).get()), "describe gave another topic id");
            Uuid id = d.topicId();
            TopicDescription byId = admin.describeTopics(TopicCollection.ofTopicIds(List.of(id)))
                    .allTopicIds().get().get(id);
            out("describe by id: " + byId.name() + " partitions=" + byId.partitions().size());

            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config cfg = admin.describeConfigs(List.of(res)).all().get().get(res);
            for (String name : List.of("retention.ms", "cleanup.policy", "max.message.bytes", "segment.bytes")) {
                ConfigEntry e = cfg.get(name);
                check(e != null, "describeConfigs lacks " + name);
                out("config " + name + "=" + e.value() + " source=" + e.source());
            }

            admin.incrementalAlterConfigs(Map.of(res, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("max.message.bytes", null), AlterConfigOp.OpType.DELETE))))
                    .all().get();
            cfg = admin.describeConfigs(List.of(res)).all().get().get(res);
            for (String name : List.of("retention.ms", "max.message.bytes")) {
                ConfigEntry e = cfg.get(name);
                out("altered " + name + "=" + e.value() + " source=" + e.source());
            }

            // Records to list and delete: 100 per partition, timestamps BASE_TS + i.
            Properties pp = common(bootstrap, "rill-java-admin-producer");
            pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                for (int i = 0; i < 300; i++) {
                    byte[] v = ("admin-" + i).getBytes(StandardCharsets.UTF_8);
                    sent.add(producer.send(new ProducerRecord<>(topic, i % 3, BASE_TS + i, null, v)));
                }
                producer.flush();
                for (int i = 0; i < sent.size(); i++) {
                    check(sent.get(i).get().offset() == i / 3, "admin record " + i + " got offset "
                            + sent.get(i).get().offset());
                }
            }
            List<TopicPartition> tps = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1),
                    new TopicPartition(topic, 2));
            listOffsets(admin, tps, "earliest", OffsetSpec.earliest());
            listOffsets(admin, tps, "latest", OffsetSpec.latest());
            listOffsets(admin, tps, "maxTimestamp", OffsetSpec.maxTimestamp());
            listOffsets(admin, tps, "forTimestamp", OffsetSpec.forTimestamp(BASE_TS + 150));

            Map<TopicPartition, RecordsToDelete> del = new HashMap<>();
            del.put(tps.get(0), RecordsToDelete.beforeOffset(40));
            del.put(tps.get(1), RecordsToDelete.beforeOffset(100));
            Map<TopicPartition, KafkaFuture<DeletedRecords>> lows = admin.deleteRecords(del).lowWatermarks();
            out("deleteRecords p0 low=" + lows.get(tps.get(0)).get().lowWatermark()
                    + " p1 low=" + lows.get(tps.get(1)).get().lowWatermark());
            try {
                admin.deleteRecords(Map.of(tps.get(2), RecordsToDelete.beforeOffset(1000))).all().get();
                throw new Failure("deleteRecords beyond the high watermark succeeded");
            } catch (ExecutionException e) {
                out("deleteRecords beyond end: " + e.getCause().getClass().getSimpleName());
            }
            listOffsets(admin, tps, "earliest", OffsetSpec.earliest());

            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all().get();
            d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            out("createPartitions partitions=" + d.partitions().size());

            admin.deleteTopics(List.of(topic)).all().get();
            boolean gone = false;
            for (int i = 0; i < 50 && !gone; i++) {
                gone = !admin.listTopics().names().get().contains(topic);
                if (!gone) {
                    Thread.sleep(100);
                }
            }
            check(gone, topic + " still listed after deleteTopics");
            try {
                admin.describeTopics(List.of(topic)).allTopicNames().get();
                throw new Failure("describing a deleted topic succeeded");
            } catch (ExecutionException e) {
                check(e.getCause() instanceof UnknownTopicOrPartitionException, "describe deleted: " + e.getCause());
            }
            out("deleted " + topic);
        }
    }

    static void listOffsets(Admin admin, List<TopicPartition> tps, String label, OffsetSpec spec) throws Exception {
        Map<TopicPartition, OffsetSpec> req = new HashMap<>();
        for (TopicPartition tp : tps) {
            req.put(tp, spec);
        }
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> res = admin.listOffsets(req).all().get();
        StringBuilder sb = new StringBuilder("listOffsets " + label);
        for (TopicPartition tp : tps) {
            ListOffsetsResult.ListOffsetsResultInfo info = res.get(tp);
            sb.append(" p").append(tp.partition()).append("=").append(info.offset()).append("@")
                    .append(info.timestamp());
        }
        out(sb.toString());
    }

    // ------------------------------------------------------------------ produce

    static void produce(String bootstrap, String topic, int partitions, String codec, int n, String seed)
            throws Exception {
        try (Admin admin = Admin.create(common(bootstrap, "rill-java-producer-admin"))) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
        } catch (ExecutionException e) {
            check(e.getCause() instanceof TopicExistsException, "create " + topic + ": " + e.getCause());
        }
        Properties p = common(bootstrap, "rill-java-producer");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        List<Future<RecordMetadata>> sent = new ArrayList<>(n);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < n; i++) {
                Rec r = makeRecord(seed, i);
                sent.add(producer.send(new ProducerRecord<>(topic, i % partitions, r.timestamp(), r.key(), r.value(),
                        r.headers())));
            }
            producer.flush();
            for (int i = 0; i < n; i++) {
                RecordMetadata md = sent.get(i).get();
                check(md.partition() == i % partitions && md.offset() == i / partitions,
                        "record " + i + " acknowledged at " + md.partition() + "/" + md.offset());
                check(md.timestamp() == BASE_TS + i, "record " + i + " acknowledged with timestamp " + md.timestamp());
            }
        }
        out("produced " + n + " codec=" + codec + " partitions=" + partitions);
    }

    // ------------------------------------------------------------------ record errors

    /** n records in one batch to a compacted topic, every third without a key; prints each send's outcome:
     * "result I ok" or "result I EXCEPTION_CLASS MESSAGE". */
    static void recordErrors(String bootstrap, String topic, int n, String codec) throws Exception {
        try (Admin admin = Admin.create(common(bootstrap, "rill-java-record-errors-admin"))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1)
                    .configs(Map.of("cleanup.policy", "compact")))).all().get();
        }
        Properties p = common(bootstrap, "rill-java-record-errors");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "60000"); // one batch: flush() sends it
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
        p.put(ProducerConfig.RETRIES_CONFIG, "0");
        List<Future<RecordMetadata>> sent = new ArrayList<>(n);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < n; i++) {
                byte[] key = i % 3 == 0 ? null : ("k" + i).getBytes(StandardCharsets.UTF_8);
                sent.add(producer.send(new ProducerRecord<>(topic, 0, key, ("v" + i).getBytes(StandardCharsets.UTF_8))));
            }
            producer.flush();
            for (int i = 0; i < n; i++) {
                try {
                    sent.get(i).get();
                    out("result " + i + " ok");
                } catch (ExecutionException e) {
                    out("result " + i + " " + e.getCause().getClass().getSimpleName() + " " + e.getCause().getMessage());
                }
            }
        }
    }

    // ------------------------------------------------------------------ consume (assign)

    static void consume(String bootstrap, String topic, int n) {
        Properties extra = new Properties();
        extra.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "2000");
        try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, "rill-java-assign", extra)) {
            List<TopicPartition> tps = partitionsOf(c, topic);
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = c.endOffsets(tps, WAIT);
            long total = 0;
            for (long e : ends.values()) {
                total += e;
            }
            check(total == n, "end offsets add up to " + total + ", expected " + n);
            Map<TopicPartition, Long> next = new HashMap<>();
            for (TopicPartition tp : tps) {
                next.put(tp, c.position(tp, WAIT));
            }
            List<String> lines = new ArrayList<>(n);
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (lines.size() < n) {
                check(System.nanoTime() < deadline, "read " + lines.size() + " of " + n + " records in 60 s");
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    check(r.offset() == next.get(tp), tp + ": offset " + r.offset() + " after " + next.get(tp));
                    next.put(tp, r.offset() + 1);
                    lines.add(line(r));
                }
            }
            for (TopicPartition tp : tps) {
                check(c.position(tp, WAIT) == ends.get(tp), tp + " position " + c.position(tp) + " != end "
                        + ends.get(tp));
            }
            check(c.poll(Duration.ofMillis(300)).isEmpty(), "records beyond the end offsets");
            lines.sort(RillJavaCheck::byPartitionOffset);
            for (String l : lines) {
                out(l);
            }
            out("consumed " + lines.size());
        }
    }

    // What Spark's Kafka source relies on beyond plain reads: offsetsForTimes (startingOffsetsByTimestamp),
    // beginningOffsets, and an out-of-range position surfacing as OffsetOutOfRangeException (failOnDataLoss) when
    // auto.offset.reset is none.
    static void edges(String bootstrap, String topic, long timestamp) {
        Properties extra = new Properties();
        extra.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, "rill-java-edges", extra)) {
            List<TopicPartition> tps = partitionsOf(c, topic);
            c.assign(tps);
            for (long ts : List.of(timestamp, Long.MAX_VALUE / 2)) {
                Map<TopicPartition, Long> query = new HashMap<>();
                for (TopicPartition tp : tps) {
                    query.put(tp, ts);
                }
                var found = c.offsetsForTimes(query, WAIT);
                StringBuilder sb = new StringBuilder("offsetsForTimes " + (ts == timestamp ? "ts" : "future"));
                for (TopicPartition tp : tps) {
                    var ot = found.get(tp);
                    sb.append(" p").append(tp.partition()).append("=")
                            .append(ot == null ? "-" : ot.offset() + "@" + ot.timestamp());
                }
                out(sb.toString());
            }
            Map<TopicPartition, Long> begins = c.beginningOffsets(tps, WAIT);
            Map<TopicPartition, Long> ends = c.endOffsets(tps, WAIT);
            StringBuilder sb = new StringBuilder("offsets");
            for (TopicPartition tp : tps) {
                sb.append(" p").append(tp.partition()).append("=").append(begins.get(tp)).append("..")
                        .append(ends.get(tp));
            }
            out(sb.toString());
            c.assign(List.of(tps.get(0)));
            c.seek(tps.get(0), ends.get(tps.get(0)) + 5);
            long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
            while (true) {
                check(System.nanoTime() < deadline, "no OffsetOutOfRangeException within 20 s");
                try {
                    check(c.poll(Duration.ofMillis(200)).isEmpty(), "records read beyond the end");
                } catch (OffsetOutOfRangeException e) {
                    out("seek beyond end: OffsetOutOfRangeException " + e.offsetOutOfRangePartitions());
                    break;
                }
            }
        }
    }

    static int byPartitionOffset(String a, String b) {
        String[] x = a.split(" ", 4);
        String[] y = b.split(" ", 4);
        int c = Integer.compare(Integer.parseInt(x[1]), Integer.parseInt(y[1]));
        return c != 0 ? c : Long.compare(Long.parseLong(x[2]), Long.parseLong(y[2]));
    }

    // ------------------------------------------------------------------ group (subscribe)

    static Properties groupProps(String group, String assignor) {
        Properties p = new Properties();
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, switch (assignor) {
            case "range" -> "org.apache.kafka.clients.consumer.RangeAssignor";
            case "cooperative-sticky" -> "org.apache.kafka.clients.consumer.CooperativeStickyAssignor";
            case "roundrobin" -> "org.apache.kafka.clients.consumer.RoundRobinAssignor";
            default -> throw new Failure("unknown assignor " + assignor);
        });
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "300");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "50");
        return p;
    }

    // Phase 1: one member reads the first half of every partition and commits exactly that position (with
    // metadata), then leaves. Phase 2: two members join the same group at once; each must resume from the committed
    // positions, partitions are split between them, and a member commits what it consumed when a partition is
    // revoked, so every record of the second half is consumed exactly once. A fresh consumer then checks the group's
    // committed offsets are the end offsets.
    static void group(String bootstrap, String topic, String group, String assignor, int n) throws Exception {
        Map<TopicPartition, Long> ends;
        List<TopicPartition> tps;
        List<String> lines = Collections.synchronizedList(new ArrayList<>());
        Map<TopicPartition, Long> half = new TreeMap<>((a, b) -> Integer.compare(a.partition(), b.partition()));
        try (KafkaConsumer<byte[], byte[]> c1 = consumer(bootstrap, "rill-java-g1", groupProps(group, assignor))) {
            tps = partitionsOf(c1, topic);
            ends = c1.endOffsets(tps, WAIT);
            for (TopicPartition tp : tps) {
                half.put(tp, ends.get(tp) / 2);
            }
            Map<TopicPartition, Long> next = new HashMap<>();
            c1.subscribe(List.of(topic));
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (!next.equals(half)) {
                check(System.nanoTime() < deadline, "phase 1 did not read half of every partition in 60 s");
                for (ConsumerRecord<byte[], byte[]> r : c1.poll(Duration.ofMillis(200))) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    if (r.offset() >= half.get(tp)) {
                        continue;
                    }
                    long expected = next.getOrDefault(tp, 0L);
                    check(r.offset() == expected, "phase 1 " + tp + ": offset " + r.offset() + " after " + expected);
                    next.put(tp, r.offset() + 1);
                    lines.add(line(r));
                }
                for (TopicPartition tp : tps) {
                    if (half.get(tp) == 0) {
                        next.put(tp, 0L);
                    }
                }
            }
            check(c1.assignment().equals(new HashSet<>(tps)), "the only member holds " + c1.assignment());
            Map<TopicPartition, OffsetAndMetadata> commit = new HashMap<>();
            for (TopicPartition tp : tps) {
                commit.put(tp, new OffsetAndMetadata(half.get(tp), "phase1-" + tp.partition()));
            }
            c1.commitSync(commit, WAIT);
            Map<TopicPartition, OffsetAndMetadata> committed = c1.committed(new HashSet<>(tps), WAIT);
            StringBuilder sb = new StringBuilder("phase1 committed");
            for (TopicPartition tp : tps) {
                OffsetAndMetadata om = committed.get(tp);
                check(om != null, tp + " has no committed offset");
                sb.append(" p").append(tp.partition()).append("=").append(om.offset()).append(":")
                        .append(om.metadata());
            }
            out(sb.toString());
        }

        // Phase 2.
        Map<TopicPartition, Long> resumedAt = new ConcurrentHashMap<>();
        Map<String, Set<Integer>> everHeld = new ConcurrentHashMap<>();
        Map<String, Set<TopicPartition>> held = new ConcurrentHashMap<>();
        long remaining = 0;
        for (TopicPartition tp : tps) {
            remaining += ends.get(tp) - half.get(tp);
        }
        final long toRead = remaining;
        int phase1 = lines.size();
        AtomicReference<Throwable> error = new AtomicReference<>();
        AtomicBoolean done = new AtomicBoolean();
        CyclicBarrier finish = new CyclicBarrier(2);
        List<Thread> threads = new ArrayList<>();
        for (String id : List.of("rill-java-g2", "rill-java-g3")) {
            everHeld.put(id, ConcurrentHashMap.newKeySet());
            held.put(id, ConcurrentHashMap.newKeySet());
            Thread t = new Thread(() -> {
                try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, id, groupProps(group, assignor))) {
                    c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                        @Override
                        public void onPartitionsRevoked(Collection<TopicPartition> revoked) {
                            if (!revoked.isEmpty()) {
                                c.commitSync(WAIT);
                            }
                            held.get(id).removeAll(revoked);
                        }

                        @Override
                        public void onPartitionsAssigned(Collection<TopicPartition> assigned) {
                            held.get(id).addAll(assigned);
                            for (TopicPartition tp : assigned) {
                                everHeld.get(id).add(tp.partition());
                            }
                        }
                    });
                    long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
                    while (error.get() == null && !done.get()) {
                        if (lines.size() - phase1 >= toRead && splitDone(held, tps)) {
                            done.set(true);
                            break;
                        }
                        if (System.nanoTime() > deadline) {
                            throw new Failure(id + ": phase 2 read " + (lines.size() - phase1) + " of " + toRead
                                    + " records, assignments " + held);
                        }
                        ConsumerRecords<byte[], byte[]> polled = c.poll(Duration.ofMillis(100));
                        for (ConsumerRecord<byte[], byte[]> r : polled) {
                            resumedAt.putIfAbsent(new TopicPartition(r.topic(), r.partition()), r.offset());
                            lines.add(line(r));
                        }
                        if (!polled.isEmpty()) {
                            c.commitAsync();
                        }
                    }
                    // Both members commit while the group is stable, then leave.
                    c.commitSync(WAIT);
                    finish.await(30, TimeUnit.SECONDS);
                } catch (Throwable e) {
                    error.compareAndSet(null, e);
                    finish.reset();
                }
            }, id);
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join(90_000);
            check(!t.isAlive(), t.getName() + " did not finish");
        }
        if (error.get() != null) {
            throw new RuntimeException(error.get());
        }
        StringBuilder sb = new StringBuilder("phase2 resumed");
        for (TopicPartition tp : tps) {
            Long at = resumedAt.get(tp);
            sb.append(" p").append(tp.partition()).append("=").append(at == null ? "-" : at);
        }
        out(sb.toString());
        Set<Integer> g2 = new TreeSet<>(everHeld.get("rill-java-g2"));
        Set<Integer> g3 = new TreeSet<>(everHeld.get("rill-java-g3"));
        out("phase2 both members held partitions=" + (!g2.isEmpty() && !g3.isEmpty()));

        try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, "rill-java-check", groupProps(group, assignor))) {
            Map<TopicPartition, OffsetAndMetadata> committed = c.committed(new HashSet<>(tps), WAIT);
            StringBuilder cs = new StringBuilder("final committed");
            for (TopicPartition tp : tps) {
                OffsetAndMetadata om = committed.get(tp);
                cs.append(" p").append(tp.partition()).append("=").append(om == null ? "-" : om.offset());
            }
            out(cs.toString());
        }
        List<String> sorted = new ArrayList<>(lines);
        sorted.sort(RillJavaCheck::byPartitionOffset);
        for (String l : sorted) {
            out(l);
        }
        out("consumed " + sorted.size());
    }

    static boolean splitDone(Map<String, Set<TopicPartition>> held, List<TopicPartition> tps) {
        List<TopicPartition> all = new ArrayList<>();
        for (Set<TopicPartition> mine : held.values()) {
            if (mine.isEmpty()) {
                return false;
            }
            all.addAll(mine);
        }
        return all.size() == tps.size() && new HashSet<>(all).equals(new HashSet<>(tps));
    }
}

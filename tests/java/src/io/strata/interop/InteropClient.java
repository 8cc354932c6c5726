package io.strata.interop;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Small CLI around the official Java client, driven by Strata's Python interop tests.
 *
 * <p>Every result goes to stdout as one JSON object per line; diagnostics go to stderr.
 * Exit codes: 0 ok, 1 error (message on stderr and as {"error":...} on stdout), 2 usage,
 * 3 consume timed out before --count records arrived.
 */
public final class InteropClient {

    static final String USAGE = String.join("\n",
        "usage: InteropClient <command> --bootstrap HOST:PORT [options]",
        "",
        "commands:",
        "  produce        --topic T --count N [--acks all|1|0|-1] [--compression none|gzip|snappy|lz4|zstd]",
        "                 [--idempotent true|false] [--value-size S] [--partition P] [--key-prefix K]",
        "                 [--value-prefix V] [--no-key] [--headers true|false] [--linger-ms MS]",
        "                 [--batch-size BYTES] [--transactional-id ID] [--timeout-ms MS]",
        "      prints {\"index\",\"partition\",\"offset\",\"timestamp\"} per acknowledged record",
        "      (or {\"index\",\"error\"}); record i has key K<i>, value V<i> (padded with 'x' to S",
        "      bytes if --value-size), header strata-index=<i>.",
        "  consume        --topic T --count N [--timeout-ms MS (default 30000)] [--group G]",
        "                 [--isolation-level read_committed|read_uncommitted] [--partition P]",
        "      without --group: assigns all partitions and reads from the beginning;",
        "      with --group: subscribes (auto.offset.reset=earliest) and commits what it read.",
        "      prints {\"partition\",\"offset\",\"key\",\"value\",\"headers\",\"timestamp\",\"timestamp_type\"}",
        "      [--min-duration-ms MS] keeps polling until MS have passed even after N records;",
        "      [--metrics NAME,...] prints {\"metrics\": {NAME: value summed over the client's metrics",
        "      of that name}} at the end (e.g. successful-reauthentication-total).",
        "  group-member   --topic T | --topic-regex R (with --group-protocol consumer: the broker",
        "                 resolves the RE2 regex) --group G [--instance-id I] [--session-timeout-ms MS]",
        "                 [--heartbeat-interval-ms MS] [--assignor range|roundrobin|sticky|cooperative-sticky]",
        "      a long-running subscribed consumer driven through stdin/stdout (one JSON object a line,",
        "      each with \"ev\" and \"t\" = epoch ms): subscribed, assigned {partitions, generation,",
        "      member_id} (the full assignment after every rebalance callback), revoked/lost",
        "      {partitions}, records {records: [[partition, offset, value]...]} after a successful",
        "      commitSync of them (commit_failed {error, records} otherwise), status {...} and",
        "      closed. stdin commands: 'status', 'close' (KafkaConsumer.close(); EOF does the same).",
        "  eos-transform  --input T --output U --group G --transactional-id X [--commit-every N (100)]",
        "                 [--suffix S ('!')] [--record-delay-ms MS] [--session-timeout-ms MS (6000)]",
        "                 [--transaction-timeout-ms MS (60000)]",
        "      consume-transform-produce with exactly-once: reads T (read_committed, subscribed as",
        "      group G), writes each record to U with the same key and value+S, and every N records",
        "      (or when a poll comes back empty) sends the consumed offsets to the transaction",
        "      (sendOffsetsToTransaction with consumer.groupMetadata()) and commits it. Prints",
        "      {\"ev\":\"started\"|\"assigned\"|\"committed\"|\"done\"|\"fenced\",...}; exits 0 once",
        "      it owns every partition of T and its position is at the LSO of each, 4 when fenced.",
        "  admin-create   --topic T [--partitions P (default 1)] [--replication-factor R (default 1)]",
        "                 [--topic-config k=v ...] [--if-not-exists]",
        "  admin-describe [--topic T]   (without --topic: describes the cluster)",
        "  admin-describe-topics --topic T [--topic U ...] [--partition-size-limit N]",
        "      Admin.describeTopics (DescribeTopicPartitions when the broker serves it, N partitions",
        "      a response); prints per topic {\"topic\",\"topic_id\",\"internal\",\"partitions\":",
        "      [{partition,leader,replicas,isr,elr,last_known_elr}]} or {\"topic\",\"error\"}.",
        "  admin-list",
        "  admin-delete   --topic T [--if-exists]",
        "",
        "common options: --config k=v (extra client property, repeatable), --timeout-ms MS",
        "                (admin/produce request timeout, default 30000)");

    private InteropClient() {}

    public static void main(String[] argv) {
        // slf4j-simple: keep the client's INFO chatter off stderr unless asked for.
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        }
        int code;
        try {
            code = run(argv);
        } catch (UsageException e) {
            System.err.println("error: " + e.getMessage());
            System.err.println(USAGE);
            code = 2;
        } catch (Throwable t) {
            Throwable cause = unwrap(t);
            System.out.println(json(obj("error", describe(cause))));
            System.err.println("error: " + describe(cause));
            // Broker-reported errors (ApiException) are expected outcomes in tests: no stack trace.
            if (!(cause instanceof org.apache.kafka.common.errors.ApiException)
                || System.getenv("STRATA_INTEROP_DEBUG") != null) {
                cause.printStackTrace(System.err);
            }
            code = 1;
        }
        System.out.flush();
        System.exit(code);
    }

    static int run(String[] argv) throws Exception {
        if (argv.length == 0 || argv[0].equals("-h") || argv[0].equals("--help")) {
            System.out.println(USAGE);
            return argv.length == 0 ? 2 : 0;
        }
        String cmd = argv[0];
        Args a = Args.parse(argv, 1);
        switch (cmd) {
            case "produce": return produce(a);
            case "consume": return consume(a);
            case "consume-perf": return consumePerf(a);
            case "group-member": return groupMember(a);
            case "eos-transform": return eosTransform(a);
            case "admin-create": return adminCreate(a);
            case "admin-describe": return adminDescribe(a);
            case "admin-describe-topics": return adminDescribeTopics(a);
            case "admin-list": return adminList(a);
            case "admin-delete": return adminDelete(a);
            default: throw new UsageException("unknown command '" + cmd + "'");
        }
    }

    // ------------------------------------------------------------------ produce

    static int produce(Args a) throws Exception {
        String topic = a.required("topic");
        int count = a.intOpt("count", 1);
        String acks = a.opt("acks", "all");
        String compression = a.opt("compression", "none");
        boolean idempotent = a.boolOpt("idempotent", false);
        int valueSize = a.intOpt("value-size", -1);
        Integer partition = a.has("partition") ? a.intOpt("partition", 0) : null;
        String keyPrefix = a.opt("key-prefix", "key-");
        String valuePrefix = a.opt("value-prefix", "value-");
        boolean noKey = a.flag("no-key");
        boolean headers = a.boolOpt("headers", true);
        String txnId = a.opt("transactional-id", null);
        int timeoutMs = a.intOpt("timeout-ms", 30000);

        Properties p = a.clientProps();
        p.put(ProducerConfig.ACKS_CONFIG, acks);
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, Boolean.toString(idempotent || txnId != null));
        p.put(ProducerConfig.LINGER_MS_CONFIG, a.opt("linger-ms", "5"));
        if (a.has("batch-size")) p.put(ProducerConfig.BATCH_SIZE_CONFIG, a.opt("batch-size", null));
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, Integer.toString(timeoutMs));
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, Integer.toString(Math.max(timeoutMs * 2, 30000)));
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, Integer.toString(timeoutMs));
        if (txnId != null) p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        a.applyExtraConfig(p);
        a.checkAllUsed();

        AtomicInteger errors = new AtomicInteger();
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            if (txnId != null) {
                producer.initTransactions();
                producer.beginTransaction();
            }
            for (int i = 0; i < count; i++) {
                byte[] key = noKey ? null : (keyPrefix + i).getBytes(StandardCharsets.UTF_8);
                byte[] value = makeValue(valuePrefix + i, valueSize);
                RecordHeaders hs = new RecordHeaders();
                if (headers) hs.add("strata-index", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
                ProducerRecord<byte[], byte[]> rec =
                    new ProducerRecord<>(topic, partition, null, key, value, hs);
                final int index = i;
                producer.send(rec, (md, ex) -> {
                    if (ex != null) {
                        errors.incrementAndGet();
                        emit(obj("index", index, "error", describe(ex)));
                    } else {
                        emit(obj("index", index, "partition", md.partition(), "offset", md.offset(),
                                 "timestamp", md.timestamp()));
                    }
                });
            }
            if (txnId != null) {
                producer.commitTransaction();
            } else {
                producer.flush();
            }
        }
        System.err.printf("produced %d record(s) to %s, %d error(s)%n", count, topic, errors.get());
        return errors.get() == 0 ? 0 : 1;
    }

    static byte[] makeValue(String base, int size) {
        byte[] b = base.getBytes(StandardCharsets.UTF_8);
        if (size < 0 || size == b.length) return b;
        byte[] out = new byte[size];
        java.util.Arrays.fill(out, (byte) 'x');
        System.arraycopy(b, 0, out, 0, Math.min(b.length, size));
        return out;
    }

    // ------------------------------------------------------------------ consume

    /**
     * Reads --count records from the start of every partition with assign() (no consumer
     * group) as fast as possible and prints ConsumerPerformance's CSV header and result line,
     * so benches/perf_report.py parses either.
     */
    static int consumePerf(Args a) throws Exception {
        String topic = a.required("topic");
        long count = a.intOpt("count", 1);
        long timeoutMs = a.intOpt("timeout-ms", 60000);
        Properties p = a.clientProps();
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, "1048576");
        a.applyExtraConfig(p);
        a.checkAllUsed();
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        long seen = 0, bytes = 0;
        long start, end;
        try (KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<PartitionInfo> infos = consumer.partitionsFor(topic, Duration.ofMillis(timeoutMs));
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : infos) tps.add(new TopicPartition(topic, pi.partition()));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            start = System.currentTimeMillis();
            while (seen < count && remainingMs(deadline) > 0) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    seen++;
                    bytes += r.serializedValueSize() + Math.max(0, r.serializedKeySize());
                }
            }
            end = System.currentTimeMillis();
        }
        double secs = Math.max(1, end - start) / 1000.0;
        double mb = bytes / (1024.0 * 1024.0);
        java.text.SimpleDateFormat f = new java.text.SimpleDateFormat("yyyy-MM-dd HH:mm:ss:SSS");
        System.out.println("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec");
        System.out.printf("%s, %s, %.4f, %.4f, %d, %.4f, 0, %d, %.4f, %.4f%n", f.format(new java.util.Date(start)),
            f.format(new java.util.Date(end)), mb, mb / secs, seen, seen / secs, end - start, mb / secs, seen / secs);
        return seen >= count ? 0 : 3;
    }

    static int consume(Args a) throws Exception {
        String topic = a.required("topic");
        int count = a.intOpt("count", 1);
        long timeoutMs = a.intOpt("timeout-ms", 30000);
        String group = a.opt("group", null);
        Integer onlyPartition = a.has("partition") ? a.intOpt("partition", 0) : null;
        long minDurationMs = a.intOpt("min-duration-ms", 0);
        String metricNames = a.opt("metrics", "");

        Properties p = a.clientProps();
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, a.opt("isolation-level", "read_uncommitted"));
        if (group != null) p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        a.applyExtraConfig(p);
        a.checkAllUsed();

        long started = System.nanoTime();
        long deadline = started + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        long minUntil = started + TimeUnit.MILLISECONDS.toNanos(minDurationMs);
        int seen = 0;
        try (KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            if (group != null && onlyPartition == null) {
                consumer.subscribe(Collections.singletonList(topic));
            } else {
                List<TopicPartition> tps = new ArrayList<>();
                if (onlyPartition != null) {
                    tps.add(new TopicPartition(topic, onlyPartition));
                } else {
                    List<PartitionInfo> infos = null;
                    while (infos == null || infos.isEmpty()) {
                        long left = remainingMs(deadline);
                        if (left <= 0) throw new RuntimeException("no metadata for topic " + topic);
                        infos = consumer.partitionsFor(topic, Duration.ofMillis(left));
                        if (infos == null || infos.isEmpty()) Thread.sleep(100);
                    }
                    for (PartitionInfo pi : infos) tps.add(new TopicPartition(topic, pi.partition()));
                }
                consumer.assign(tps);
                if (group == null) consumer.seekToBeginning(tps);
            }
            while (seen < count || remainingMs(minUntil) > 0) {
                long left = remainingMs(deadline);
                if (left <= 0) break;
                ConsumerRecords<byte[], byte[]> recs = consumer.poll(Duration.ofMillis(Math.min(left, 500)));
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    if (seen >= count && minDurationMs == 0) break;
                    List<Object> hs = new ArrayList<>();
                    for (Header h : r.headers()) hs.add(obj("key", h.key(), "value", str(h.value())));
                    emit(obj("partition", r.partition(), "offset", r.offset(), "key", str(r.key()),
                             "value", str(r.value()), "headers", hs, "timestamp", r.timestamp(),
                             "timestamp_type", r.timestampType().toString()));
                    seen++;
                }
            }
            if (group != null) consumer.commitSync(Duration.ofMillis(Math.max(remainingMs(deadline), 5000)));
            if (!metricNames.isEmpty()) {
                Map<String, Object> values = new LinkedHashMap<>();
                for (String name : metricNames.split(",")) {
                    double sum = 0;
                    for (Map.Entry<org.apache.kafka.common.MetricName, ? extends org.apache.kafka.common.Metric> m
                             : consumer.metrics().entrySet()) {
                        if (m.getKey().name().equals(name) && m.getValue().metricValue() instanceof Number) {
                            sum += ((Number) m.getValue().metricValue()).doubleValue();
                        }
                    }
                    values.put(name, sum);
                }
                emit(obj("metrics", values));
            }
        }
        System.err.printf("consumed %d/%d record(s) from %s%n", seen, count, topic);
        if (seen < count) {
            System.err.printf("error: timed out after %d ms with %d of %d record(s)%n", timeoutMs, seen, count);
            return 3;
        }
        return 0;
    }

    // ------------------------------------------------------------------ group-member

    static final class GroupEvents {
        static synchronized void emit(String ev, Object... kv) {
            Object[] all = new Object[kv.length + 4];
            all[0] = "ev";
            all[1] = ev;
            all[2] = "t";
            all[3] = System.currentTimeMillis();
            System.arraycopy(kv, 0, all, 4, kv.length);
            System.out.println(json(obj(all)));
            System.out.flush();
        }
    }

    static List<Object> partitionsJson(Collection<TopicPartition> tps) {
        List<Integer> ps = new ArrayList<>();
        for (TopicPartition tp : tps) ps.add(tp.partition());
        Collections.sort(ps);
        return new ArrayList<>(ps);
    }

    /** "topic-partition" names, sorted (for assignments spanning several topics). */
    static List<Object> topicPartitionsJson(Collection<TopicPartition> tps) {
        List<String> names = new ArrayList<>();
        for (TopicPartition tp : tps) names.add(tp.topic() + "-" + tp.partition());
        Collections.sort(names);
        return new ArrayList<>(names);
    }

    /** Heartbeat responses the consumer has received (its heartbeat-total metric). */
    static long heartbeats(KafkaConsumer<?, ?> consumer) {
        for (Map.Entry<org.apache.kafka.common.MetricName, ? extends org.apache.kafka.common.Metric> m
                 : consumer.metrics().entrySet()) {
            if (m.getKey().name().equals("heartbeat-total") && m.getValue().metricValue() instanceof Number) {
                return ((Number) m.getValue().metricValue()).longValue();
            }
        }
        return -1;
    }

    static String assignorClass(String name) {
        switch (name) {
            case "range": return "org.apache.kafka.clients.consumer.RangeAssignor";
            case "roundrobin": return "org.apache.kafka.clients.consumer.RoundRobinAssignor";
            case "sticky": return "org.apache.kafka.clients.consumer.StickyAssignor";
            case "cooperative-sticky": return "org.apache.kafka.clients.consumer.CooperativeStickyAssignor";
            default: return name;
        }
    }

    /**
     * A subscribed consumer (classic group protocol) that runs until told to close: it reports
     * every rebalance and commits (commitSync) each polled batch before reporting its records,
     * so the Python tests can drive several members of one group and kill -9 some of them.
     */
    static int groupMember(Args a) throws Exception {
        String topicRegex = a.opt("topic-regex", null);
        String topic = topicRegex == null ? a.required("topic") : null;
        String group = a.required("group");
        String instanceId = a.opt("instance-id", null);
        Properties p = a.clientProps();
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        // --group-protocol consumer: KIP-848, the broker assigns (uniform or range); the
        // classic-only settings (client assignor, session timeout, heartbeat) do not apply.
        String groupProtocol = a.opt("group-protocol", "classic");
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, groupProtocol);
        if (groupProtocol.equals("classic")) {
            p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignorClass(a.opt("assignor", "range")));
            if (a.has("session-timeout-ms")) p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, a.opt("session-timeout-ms", null));
            if (a.has("heartbeat-interval-ms")) p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, a.opt("heartbeat-interval-ms", null));
        } else if (a.has("assignor")) {
            p.put(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, a.opt("assignor", "uniform"));
        }
        if (instanceId != null) p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instanceId);
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        a.applyExtraConfig(p);
        a.checkAllUsed();

        final java.util.concurrent.atomic.AtomicBoolean closeRequested = new java.util.concurrent.atomic.AtomicBoolean();
        final java.util.concurrent.atomic.AtomicBoolean statusRequested = new java.util.concurrent.atomic.AtomicBoolean();
        Thread stdin = new Thread(() -> {
            try (java.io.BufferedReader r = new java.io.BufferedReader(
                     new java.io.InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    line = line.trim();
                    if (line.equals("close")) break;
                    if (line.equals("status")) statusRequested.set(true);
                }
            } catch (java.io.IOException e) {
                // treat like EOF
            }
            closeRequested.set(true);
        }, "stdin");
        stdin.setDaemon(true);
        stdin.start();

        try (KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            org.apache.kafka.clients.consumer.ConsumerRebalanceListener listener =
                new org.apache.kafka.clients.consumer.ConsumerRebalanceListener() {
                    @Override
                    public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                        GroupEvents.emit("revoked", "partitions", partitionsJson(parts));
                    }

                    @Override
                    public void onPartitionsLost(Collection<TopicPartition> parts) {
                        GroupEvents.emit("lost", "partitions", partitionsJson(parts));
                    }

                    @Override
                    public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                        GroupEvents.emit("assigned", "partitions", partitionsJson(consumer.assignment()),
                                         "topic_partitions", topicPartitionsJson(consumer.assignment()),
                                         "generation", consumer.groupMetadata().generationId(),
                                         "member_id", consumer.groupMetadata().memberId());
                    }
                };
            if (topicRegex != null) {
                consumer.subscribe(new org.apache.kafka.clients.consumer.SubscriptionPattern(topicRegex), listener);
            } else {
                consumer.subscribe(Collections.singletonList(topic), listener);
            }
            GroupEvents.emit("subscribed");
            while (!closeRequested.get()) {
                if (statusRequested.getAndSet(false)) {
                    GroupEvents.emit("status", "partitions", partitionsJson(consumer.assignment()),
                                     "generation", consumer.groupMetadata().generationId(),
                                     "member_id", consumer.groupMetadata().memberId(),
                                     "heartbeats", heartbeats(consumer));
                }
                ConsumerRecords<byte[], byte[]> recs = consumer.poll(Duration.ofMillis(200));
                if (recs.isEmpty()) continue;
                List<Object> items = new ArrayList<>();
                Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    List<Object> item = new ArrayList<>();
                    item.add(r.partition());
                    item.add(r.offset());
                    item.add(str(r.value()));
                    items.add(item);
                    offsets.put(new TopicPartition(r.topic(), r.partition()),
                                new org.apache.kafka.clients.consumer.OffsetAndMetadata(r.offset() + 1));
                }
                try {
                    consumer.commitSync(offsets, Duration.ofSeconds(30));
                    GroupEvents.emit("records", "records", items);
                } catch (RuntimeException e) {
                    GroupEvents.emit("commit_failed", "error", describe(e), "records", items);
                }
            }
        }
        GroupEvents.emit("closed");
        return 0;
    }

    // ------------------------------------------------------------------ eos-transform

    /**
     * The consume-transform-produce loop of KIP-98/KIP-447: one transaction holds the output
     * records and the input offsets, so after a crash the next instance (same transactional.id,
     * which fences the old producer epoch and aborts its open transaction) resumes exactly after
     * the last committed transaction. Written so that it can be SIGKILLed at any instruction.
     */
    static int eosTransform(Args a) throws Exception {
        String input = a.required("input");
        String output = a.required("output");
        String group = a.required("group");
        String txnId = a.required("transactional-id");
        int commitEvery = a.intOpt("commit-every", 100);
        int recordDelayMs = a.intOpt("record-delay-ms", 0);
        byte[] suffix = a.opt("suffix", "!").getBytes(StandardCharsets.UTF_8);

        Properties cp = a.clientProps();
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        // A SIGKILLed member stays in the group until its session expires; keep that short.
        cp.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, a.opt("session-timeout-ms", "6000"));
        cp.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, Integer.toString(Math.max(commitEvery, 1)));
        cp.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        Properties pp = a.clientProps();
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        pp.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, a.opt("transaction-timeout-ms", "60000"));
        a.applyExtraConfig(cp);
        a.applyExtraConfig(pp);
        a.checkAllUsed();

        long total = 0;
        try (KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(cp, new ByteArrayDeserializer(), new ByteArrayDeserializer());
             KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.initTransactions();
            GroupEvents.emit("started", "transactional_id", txnId);
            // Offsets (next to read) of the records in the open transaction, per input partition.
            final Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> pending = new HashMap<>();
            final boolean[] inTxn = {false};
            final long[] committedTotal = {0};
            final int[] txnRecords = {0};
            Runnable commit = () -> {
                if (!inTxn[0]) return;
                if (!pending.isEmpty()) {
                    producer.sendOffsetsToTransaction(new HashMap<>(pending), consumer.groupMetadata());
                }
                producer.commitTransaction();
                committedTotal[0] += txnRecords[0];
                GroupEvents.emit("committed", "records", txnRecords[0], "total", committedTotal[0],
                                 "offsets", offsetsJson(pending));
                pending.clear();
                txnRecords[0] = 0;
                inTxn[0] = false;
            };
            org.apache.kafka.clients.consumer.ConsumerRebalanceListener listener =
                new org.apache.kafka.clients.consumer.ConsumerRebalanceListener() {
                    @Override
                    public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                        // Still a member of the current generation: finish what was read.
                        commit.run();
                        GroupEvents.emit("revoked", "partitions", partitionsJson(parts));
                    }

                    @Override
                    public void onPartitionsLost(Collection<TopicPartition> parts) {
                        // No longer a member: the offsets could not be committed, so drop the
                        // output too. The partitions restart from the committed offsets.
                        if (inTxn[0]) {
                            producer.abortTransaction();
                            pending.clear();
                            txnRecords[0] = 0;
                            inTxn[0] = false;
                        }
                        GroupEvents.emit("lost", "partitions", partitionsJson(parts));
                    }

                    @Override
                    public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                        GroupEvents.emit("assigned", "partitions", partitionsJson(consumer.assignment()),
                                         "generation", consumer.groupMetadata().generationId());
                    }
                };
            consumer.subscribe(Collections.singletonList(input), listener);
            int inputPartitions = consumer.partitionsFor(input, Duration.ofSeconds(30)).size();
            try {
                while (true) {
                    ConsumerRecords<byte[], byte[]> recs = consumer.poll(Duration.ofMillis(200));
                    for (ConsumerRecord<byte[], byte[]> r : recs) {
                        if (!inTxn[0]) {
                            producer.beginTransaction();
                            inTxn[0] = true;
                        }
                        byte[] v = r.value() == null ? new byte[0] : r.value();
                        byte[] out = java.util.Arrays.copyOf(v, v.length + suffix.length);
                        System.arraycopy(suffix, 0, out, v.length, suffix.length);
                        producer.send(new ProducerRecord<>(output, null, r.key(), out));
                        pending.put(new TopicPartition(r.topic(), r.partition()),
                                    new org.apache.kafka.clients.consumer.OffsetAndMetadata(r.offset() + 1));
                        txnRecords[0]++;
                        if (recordDelayMs > 0) Thread.sleep(recordDelayMs);
                        if (txnRecords[0] >= commitEvery) commit.run();
                    }
                    if (!recs.isEmpty()) continue;
                    commit.run();
                    java.util.Set<TopicPartition> owned = consumer.assignment();
                    if (owned.size() < inputPartitions) continue;
                    // Under read_committed endOffsets() is the last stable offset.
                    Map<TopicPartition, Long> end = consumer.endOffsets(owned);
                    boolean caughtUp = true;
                    for (TopicPartition tp : owned) {
                        if (consumer.position(tp) < end.get(tp)) caughtUp = false;
                    }
                    if (caughtUp) break;
                }
            } catch (org.apache.kafka.common.errors.ProducerFencedException
                     | org.apache.kafka.common.errors.InvalidProducerEpochException e) {
                GroupEvents.emit("fenced", "error", describe(e));
                return 4;
            }
            total = committedTotal[0];
            GroupEvents.emit("done", "total", total);
        }
        return 0;
    }

    static Map<String, Object> offsetsJson(
            Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> offsets) {
        Map<String, Object> m = new java.util.TreeMap<>();
        for (Map.Entry<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> e : offsets.entrySet()) {
            m.put(Integer.toString(e.getKey().partition()), e.getValue().offset());
        }
        return m;
    }

    static long remainingMs(long deadlineNanos) {
        return TimeUnit.NANOSECONDS.toMillis(deadlineNanos - System.nanoTime());
    }

    // ------------------------------------------------------------------ admin

    static Admin admin(Args a) {
        Properties p = a.clientProps();
        String t = a.opt("timeout-ms", "30000");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, t);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, t);
        a.applyExtraConfig(p);
        return Admin.create(p);
    }

    static int adminCreate(Args a) throws Exception {
        String topic = a.required("topic");
        int partitions = a.intOpt("partitions", 1);
        short rf = (short) a.intOpt("replication-factor", 1);
        boolean ifNotExists = a.flag("if-not-exists");
        Map<String, String> configs = new HashMap<>();
        for (String kv : a.all("topic-config")) {
            int eq = kv.indexOf('=');
            if (eq <= 0) throw new UsageException("--topic-config wants key=value, got '" + kv + "'");
            configs.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        try (Admin admin = admin(a)) {
            a.checkAllUsed();
            NewTopic nt = new NewTopic(topic, partitions, rf).configs(configs);
            try {
                admin.createTopics(Collections.singletonList(nt)).all().get();
                emit(obj("created", topic, "partitions", partitions, "replication_factor", (int) rf));
            } catch (ExecutionException e) {
                if (ifNotExists && e.getCause() instanceof org.apache.kafka.common.errors.TopicExistsException) {
                    emit(obj("exists", topic));
                } else {
                    throw e;
                }
            }
        }
        return 0;
    }

    static int adminDescribe(Args a) throws Exception {
        String topic = a.opt("topic", null);
        try (Admin admin = admin(a)) {
            a.checkAllUsed();
            if (topic == null) {
                DescribeClusterResult r = admin.describeCluster();
                List<Object> nodes = new ArrayList<>();
                for (Node n : r.nodes().get()) nodes.add(nodeJson(n));
                Node controller = r.controller().get();
                emit(obj("cluster_id", r.clusterId().get(), "controller",
                         controller == null ? null : controller.id(), "nodes", nodes));
                return 0;
            }
            TopicDescription d = admin.describeTopics(Collections.singletonList(topic))
                .allTopicNames().get().get(topic);
            List<Object> parts = new ArrayList<>();
            for (TopicPartitionInfo pi : d.partitions()) {
                parts.add(obj("partition", pi.partition(),
                              "leader", pi.leader() == null ? null : pi.leader().id(),
                              "replicas", nodeIds(pi.replicas()), "isr", nodeIds(pi.isr())));
            }
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config cfg = admin.describeConfigs(Collections.singletonList(res)).all().get().get(res);
            Map<String, Object> configs = new LinkedHashMap<>();
            for (ConfigEntry e : cfg.entries()) {
                if (e.source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG) configs.put(e.name(), e.value());
            }
            emit(obj("topic", d.name(), "topic_id", d.topicId().toString(), "internal", d.isInternal(),
                     "partitions", parts, "configs", configs));
        }
        return 0;
    }

    static int adminDescribeTopics(Args a) throws Exception {
        List<String> topics = a.all("topic");
        if (topics.isEmpty()) throw new UsageException("--topic is required");
        int limit = a.intOpt("partition-size-limit", 2000);
        try (Admin admin = admin(a)) {
            a.checkAllUsed();
            Map<String, org.apache.kafka.common.KafkaFuture<TopicDescription>> futures = admin
                .describeTopics(org.apache.kafka.common.TopicCollection.ofTopicNames(topics),
                                new DescribeTopicsOptions().partitionSizeLimitPerResponse(limit))
                .topicNameValues();
            for (String topic : topics) {
                TopicDescription d;
                try {
                    d = futures.get(topic).get();
                } catch (ExecutionException e) {
                    emit(obj("topic", topic, "error", describe(unwrap(e))));
                    continue;
                }
                List<Object> parts = new ArrayList<>();
                for (TopicPartitionInfo pi : d.partitions()) {
                    parts.add(obj("partition", pi.partition(),
                                  "leader", pi.leader() == null ? null : pi.leader().id(),
                                  "replicas", nodeIds(pi.replicas()), "isr", nodeIds(pi.isr()),
                                  "elr", pi.elr() == null ? null : nodeIds(pi.elr()),
                                  "last_known_elr", pi.lastKnownElr() == null ? null : nodeIds(pi.lastKnownElr())));
                }
                emit(obj("topic", d.name(), "topic_id", d.topicId().toString(),
                         "internal", d.isInternal(), "partitions", parts));
            }
        }
        return 0;
    }

    static int adminList(Args a) throws Exception {
        try (Admin admin = admin(a)) {
            a.checkAllUsed();
            List<String> names = new ArrayList<>(admin.listTopics().names().get());
            Collections.sort(names);
            emit(obj("topics", names));
        }
        return 0;
    }

    static int adminDelete(Args a) throws Exception {
        String topic = a.required("topic");
        boolean ifExists = a.flag("if-exists");
        try (Admin admin = admin(a)) {
            a.checkAllUsed();
            try {
                admin.deleteTopics(Collections.singletonList(topic)).all().get();
                emit(obj("deleted", topic));
            } catch (ExecutionException e) {
                if (ifExists && e.getCause() instanceof org.apache.kafka.common.errors.UnknownTopicOrPartitionException) {
                    emit(obj("absent", topic));
                } else {
                    throw e;
                }
            }
        }
        return 0;
    }

    static Map<String, Object> nodeJson(Node n) {
        return obj("id", n.id(), "host", n.host(), "port", n.port(), "rack", n.rack());
    }

    static List<Object> nodeIds(Collection<Node> nodes) {
        List<Object> ids = new ArrayList<>();
        for (Node n : nodes) ids.add(n.id());
        return ids;
    }

    // ------------------------------------------------------------------ helpers

    static synchronized void emit(Map<String, Object> o) {
        System.out.println(json(o));
    }

    static String str(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    static Throwable unwrap(Throwable t) {
        while ((t instanceof ExecutionException || t instanceof java.util.concurrent.CompletionException)
               && t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    static String describe(Throwable t) {
        t = unwrap(t);
        return t.getClass().getSimpleName() + ": " + t.getMessage();
    }

    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        return m;
    }

    static String json(Object o) {
        StringBuilder sb = new StringBuilder();
        writeJson(sb, o);
        return sb.toString();
    }

    @SuppressWarnings("unchecked")
    static void writeJson(StringBuilder sb, Object o) {
        if (o == null) {
            sb.append("null");
        } else if (o instanceof String) {
            quote(sb, (String) o);
        } else if (o instanceof Number || o instanceof Boolean) {
            sb.append(o);
        } else if (o instanceof Map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<String, Object> e : ((Map<String, Object>) o).entrySet()) {
                if (!first) sb.append(',');
                first = false;
                quote(sb, e.getKey());
                sb.append(':');
                writeJson(sb, e.getValue());
            }
            sb.append('}');
        } else if (o instanceof Collection) {
            sb.append('[');
            boolean first = true;
            for (Object x : (Collection<Object>) o) {
                if (!first) sb.append(',');
                first = false;
                writeJson(sb, x);
            }
            sb.append(']');
        } else {
            quote(sb, o.toString());
        }
    }

    static void quote(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '\t': sb.append("\\t"); break;
                default:
                    if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                    else sb.append(c);
            }
        }
        sb.append('"');
    }

    static final class UsageException extends RuntimeException {
        private static final long serialVersionUID = 1L;
        UsageException(String m) { super(m); }
    }

    /** --name value / --name=value / --flag options; repeated options are kept in order. */
    static final class Args {
        private final Map<String, List<String>> values = new LinkedHashMap<>();
        private final java.util.Set<String> used = new java.util.HashSet<>();
        private static final java.util.Set<String> FLAGS =
            new java.util.HashSet<>(java.util.Arrays.asList("no-key", "if-not-exists", "if-exists"));

        static Args parse(String[] argv, int from) {
            Args a = new Args();
            for (int i = from; i < argv.length; i++) {
                String s = argv[i];
                if (!s.startsWith("--") || s.length() == 2) throw new UsageException("unexpected argument '" + s + "'");
                String name = s.substring(2);
                String value;
                int eq = name.indexOf('=');
                if (eq >= 0) {
                    value = name.substring(eq + 1);
                    name = name.substring(0, eq);
                } else if (FLAGS.contains(name)) {
                    value = "true";
                } else {
                    if (i + 1 >= argv.length) throw new UsageException("--" + name + " needs a value");
                    value = argv[++i];
                }
                a.values.computeIfAbsent(name, k -> new ArrayList<>()).add(value);
            }
            return a;
        }

        boolean has(String n) { return values.containsKey(n); }

        String opt(String n, String def) {
            used.add(n);
            List<String> v = values.get(n);
            return v == null ? def : v.get(v.size() - 1);
        }

        List<String> all(String n) {
            used.add(n);
            return values.getOrDefault(n, Collections.emptyList());
        }

        String required(String n) {
            String v = opt(n, null);
            if (v == null) throw new UsageException("--" + n + " is required");
            return v;
        }

        int intOpt(String n, int def) {
            String v = opt(n, null);
            if (v == null) return def;
            try {
                return Integer.parseInt(v);
            } catch (NumberFormatException e) {
                throw new UsageException("--" + n + " wants an integer, got '" + v + "'");
            }
        }

        boolean boolOpt(String n, boolean def) {
            String v = opt(n, null);
            if (v == null) return def;
            if (v.equalsIgnoreCase("true")) return true;
            if (v.equalsIgnoreCase("false")) return false;
            throw new UsageException("--" + n + " wants true or false, got '" + v + "'");
        }

        boolean flag(String n) { return boolOpt(n, false); }

        Properties clientProps() {
            Properties p = new Properties();
            p.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, required("bootstrap"));
            p.put(CommonClientConfigs.CLIENT_ID_CONFIG, "strata-interop-java");
            return p;
        }

        void applyExtraConfig(Properties p) {
            for (String kv : all("config")) {
                int eq = kv.indexOf('=');
                if (eq <= 0) throw new UsageException("--config wants key=value, got '" + kv + "'");
                p.put(kv.substring(0, eq), kv.substring(eq + 1));
            }
        }

        void checkAllUsed() {
            used.add("timeout-ms");
            for (String n : values.keySet()) {
                if (!used.contains(n)) throw new UsageException("unknown option --" + n);
            }
        }
    }
}

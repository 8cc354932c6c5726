package io.strata.interop;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * A share-group consumer (KIP-932, {@link KafkaShareConsumer} of kafka-clients) driven by
 * Strata's Python interop tests (tests/interop/test_share_groups.py).
 *
 * <p>One JSON object per line on stdout (diagnostics on stderr), each with "event" and "t"
 * (epoch ms when it was printed):
 * <ul>
 * <li>{"event":"started","member":C,"group":G,"topics":[...],"mode":M,"ack_mode":A}</li>
 * <li>{"event":"record","member","poll","topic","partition","offset","delivery_count","key",
 *     "value","ack"}: every record a poll returned; "ack" is the AcknowledgeType the app gave
 *     it (ACCEPT, RELEASE, REJECT), null when it held it or acknowledges implicitly.</li>
 * <li>{"event":"ack_result","member","topic","partition","offsets":[...],"error"}: one per
 *     partition each time the acknowledgement commit callback runs (error is null or
 *     "ExceptionClass: message").</li>
 * <li>{"event":"commit","member","topic","partition","error"}: one per partition of each
 *     commitSync() result.</li>
 * <li>{"event":"poll_error","error"}: poll() threw (the app goes on polling).</li>
 * <li>{"event":"holding","member","count"}: --hold-after-polls reached: it stops polling and
 *     acknowledging, keeping the consumer (and its heartbeats) alive until killed or closed.</li>
 * <li>{"event":"idle","member","count"}: nothing arrived for --idle-exit-ms (or no record ever
 *     within --first-record-timeout-ms).</li>
 * <li>{"event":"done","member","count","polls","acquisition_lock_timeout_ms"}: after close().</li>
 * </ul>
 *
 * <p>Modes (--mode): hold (= --hold-after-polls 1: prints the first poll's records and never
 * acknowledges them), accept, release, reject (every record), release-odd (odd offsets
 * released, even ones accepted), mixed (offset % 3: 0 accepted; 1 released on its first
 * delivery and accepted afterwards; 2 rejected), implicit (share.acknowledgement.mode=implicit:
 * the next poll, commitSync or close acknowledges). Every mode but implicit uses
 * share.acknowledgement.mode=explicit and, with --commit sync (default), commitSync() after
 * acknowledging each batch (--commit async: commitAsync(); none: the acknowledgements ride on
 * the next ShareFetch).
 *
 * <p>stdin (with the Python side holding it open): "close" ends the loop and closes the
 * consumer, also while holding (its unacknowledged records go back to the broker as the
 * client decides). EOF on stdin is ignored, so it can run with stdin at /dev/null.
 */
public final class ShareConsumerApp {

    static final String USAGE = String.join("\n",
        "usage: ShareConsumerApp --bootstrap HOST:PORT --group G --topic T[,U...]",
        "       [--mode accept|release|reject|release-odd|mixed|hold|implicit] [--client-id C]",
        "       [--max-poll-records N] [--poll-ms MS (500)] [--max-records N (0: no limit)]",
        "       [--idle-exit-ms MS (0: never)] [--first-record-timeout-ms MS (60000)]",
        "       [--hold-after-polls K (0: never)] [--commit sync|async|none (sync)]",
        "       [--record-delay-ms MS] [--close-timeout-ms MS (30000)] [--config k=v ...]");

    private ShareConsumerApp() {}

    static volatile String member = "share-consumer";

    public static void main(String[] argv) {
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        }
        int code;
        try {
            code = run(argv);
        } catch (InteropClient.UsageException e) {
            System.err.println("error: " + e.getMessage());
            System.err.println(USAGE);
            code = 2;
        } catch (Throwable t) {
            emit(InteropClient.obj("event", "error", "member", member, "error", InteropClient.describe(t)));
            t.printStackTrace(System.err);
            code = 1;
        }
        System.out.flush();
        System.exit(code);
    }

    static void emit(Map<String, Object> o) {
        o.put("t", System.currentTimeMillis());
        synchronized (System.out) {
            System.out.println(InteropClient.json(o));
            System.out.flush();
        }
    }

    static AcknowledgeType decide(String mode, ConsumerRecord<byte[], byte[]> r) {
        int count = r.deliveryCount().map(Short::intValue).orElse(1);
        switch (mode) {
            case "accept": return AcknowledgeType.ACCEPT;
            case "release": return AcknowledgeType.RELEASE;
            case "reject": return AcknowledgeType.REJECT;
            case "release-odd": return r.offset() % 2 == 1 ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT;
            case "mixed":
                switch ((int) (r.offset() % 3)) {
                    case 0: return AcknowledgeType.ACCEPT;
                    case 1: return count < 2 ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT;
                    default: return AcknowledgeType.REJECT;
                }
            default: throw new InteropClient.UsageException("unknown --mode '" + mode + "'");
        }
    }

    static int run(String[] argv) throws Exception {
        if (argv.length > 0 && (argv[0].equals("-h") || argv[0].equals("--help"))) {
            System.out.println(USAGE);
            return 0;
        }
        InteropClient.Args a = InteropClient.Args.parse(argv, 0);
        String group = a.required("group");
        List<String> topics = Arrays.asList(a.required("topic").split(","));
        String mode = a.opt("mode", "accept");
        boolean implicit = mode.equals("implicit");
        int holdAfterPolls = a.intOpt("hold-after-polls", mode.equals("hold") ? 1 : 0);
        if (mode.equals("hold") && holdAfterPolls != 1) {
            throw new InteropClient.UsageException("--mode hold holds the first poll's records");
        }
        if (!implicit && !mode.equals("hold")) decide(mode, new ConsumerRecord<>("t", 0, 0L, null, null)); // validate
        member = a.opt("client-id", "share-" + ProcessHandle.current().pid());
        int pollMs = a.intOpt("poll-ms", 500);
        int maxRecords = a.intOpt("max-records", 0);
        int idleExitMs = a.intOpt("idle-exit-ms", 0);
        int firstRecordTimeoutMs = a.intOpt("first-record-timeout-ms", 60000);
        String commit = a.opt("commit", "sync");
        if (!Arrays.asList("sync", "async", "none").contains(commit)) {
            throw new InteropClient.UsageException("--commit wants sync, async or none");
        }
        int recordDelayMs = a.intOpt("record-delay-ms", 0);
        int closeTimeoutMs = a.intOpt("close-timeout-ms", 30000);

        Properties p = a.clientProps();
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, member);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, implicit ? "implicit" : "explicit");
        if (a.has("max-poll-records")) p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, a.opt("max-poll-records", null));
        a.applyExtraConfig(p);
        a.checkAllUsed();

        AtomicBoolean closeRequested = new AtomicBoolean();
        KafkaShareConsumer<byte[], byte[]> consumer =
            new KafkaShareConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        Thread stdin = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    if (line.trim().equals("close")) {
                        closeRequested.set(true);
                        consumer.wakeup();
                    }
                }
            } catch (IOException e) {
                // like EOF: keep running
            }
        }, "stdin");
        stdin.setDaemon(true);
        stdin.start();

        consumer.setAcknowledgementCommitCallback((Map<TopicIdPartition, Set<Long>> offsets, Exception ex) -> {
            for (Map.Entry<TopicIdPartition, Set<Long>> e : offsets.entrySet()) {
                emit(InteropClient.obj("event", "ack_result", "member", member,
                                       "topic", e.getKey().topic(), "partition", e.getKey().partition(),
                                       "offsets", new ArrayList<>(new TreeSet<>(e.getValue())),
                                       "error", ex == null ? null : InteropClient.describe(ex)));
            }
        });
        consumer.subscribe(topics);
        emit(InteropClient.obj("event", "started", "member", member, "group", group, "topics", topics,
                               "mode", mode, "ack_mode", implicit ? "implicit" : "explicit"));

        long start = System.nanoTime();
        long lastRecord = start;
        long count = 0;
        int polls = 0;
        boolean holding = false;
        try {
            while (!closeRequested.get()) {
                if (holding) {
                    Thread.sleep(100);
                    continue;
                }
                ConsumerRecords<byte[], byte[]> recs;
                try {
                    recs = consumer.poll(Duration.ofMillis(pollMs));
                } catch (WakeupException e) {
                    continue;
                } catch (KafkaException e) {
                    emit(InteropClient.obj("event", "poll_error", "member", member, "error", InteropClient.describe(e)));
                    Thread.sleep(200);
                    continue;
                }
                long now = System.nanoTime();
                if (recs.isEmpty()) {
                    long sinceMs = TimeUnit.NANOSECONDS.toMillis(now - lastRecord);
                    if ((count > 0 && idleExitMs > 0 && sinceMs >= idleExitMs)
                        || (count == 0 && firstRecordTimeoutMs > 0 && sinceMs >= firstRecordTimeoutMs)) {
                        emit(InteropClient.obj("event", "idle", "member", member, "count", count));
                        break;
                    }
                    continue;
                }
                polls++;
                lastRecord = now;
                boolean hold = holdAfterPolls > 0 && polls >= holdAfterPolls;
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    AcknowledgeType type = null;
                    if (!implicit && !hold) {
                        type = decide(mode, r);
                        consumer.acknowledge(r, type);
                    }
                    Optional<Short> dc = r.deliveryCount();
                    emit(InteropClient.obj("event", "record", "member", member, "poll", polls,
                                           "topic", r.topic(), "partition", r.partition(), "offset", r.offset(),
                                           "delivery_count", dc.isPresent() ? (Object) dc.get().intValue() : null,
                                           "key", InteropClient.str(r.key()), "value", InteropClient.str(r.value()),
                                           "ack", type == null ? null : type.name()));
                    count++;
                }
                if (recordDelayMs > 0) Thread.sleep((long) recordDelayMs * recs.count());
                if (hold) {
                    holding = true;
                    emit(InteropClient.obj("event", "holding", "member", member, "count", count));
                    continue;
                }
                if (!implicit) {
                    try {
                        if (commit.equals("sync")) {
                            Map<TopicIdPartition, Optional<KafkaException>> res = consumer.commitSync(Duration.ofSeconds(30));
                            for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : res.entrySet()) {
                                emit(InteropClient.obj("event", "commit", "member", member,
                                                       "topic", e.getKey().topic(), "partition", e.getKey().partition(),
                                                       "error", e.getValue().map(InteropClient::describe).orElse(null)));
                            }
                        } else if (commit.equals("async")) {
                            consumer.commitAsync();
                        }
                    } catch (WakeupException e) {
                        // "close" arrived during the commit: close() below sends what is pending.
                        continue;
                    }
                }
                if (maxRecords > 0 && count >= maxRecords) break;
            }
        } finally {
            Optional<Integer> lock = Optional.empty();
            try {
                lock = consumer.acquisitionLockTimeoutMs();
            } catch (RuntimeException e) {
                // not known
            }
            consumer.close(Duration.ofMillis(closeTimeoutMs));
            emit(InteropClient.obj("event", "done", "member", member, "count", count, "polls", polls,
                                   "acquisition_lock_timeout_ms", lock.orElse(null)));
        }
        return 0;
    }
}

package io.strata.interop;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.Stores;

/**
 * Kafka Streams word count with processing.guarantee=exactly_once_v2, driven by Strata's
 * Python interop tests (tests/interop/test_streams_eos.py).
 *
 * <pre>
 * StreamsWordCount --bootstrap HOST:PORT --input T --output U --application-id A --state-dir DIR
 *                  [--config k=v ...]
 * </pre>
 *
 * <p>Splits every input value into lower-case words, re-keys by word (a repartition topic),
 * counts in an in-memory store (its changelog topic is what restores it) and writes
 * word -&gt; count (String key, Long value) to U. Streams creates the internal topics itself
 * through the admin API. Prints one JSON object a line on stdout: {"ev":"state","from","to"}
 * on every state change, {"ev":"error",...} from the uncaught-exception handler (which shuts
 * the client down) and {"ev":"closed"}. Reading "close" or EOF on stdin closes the app;
 * exit code 0 after a clean close, 1 if the app had gone to ERROR.
 */
public final class StreamsWordCount {

    private StreamsWordCount() {}

    public static void main(String[] argv) throws Exception {
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        }
        InteropClient.Args a = InteropClient.Args.parse(argv, 0);
        String input = a.required("input");
        String output = a.required("output");

        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a.required("bootstrap"));
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, a.required("application-id"));
        p.put(StreamsConfig.STATE_DIR_CONFIG, a.required("state-dir"));
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "1");
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "100");
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        a.applyExtraConfig(p);
        a.checkAllUsed();

        StreamsBuilder b = new StreamsBuilder();
        b.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(v -> Arrays.asList(v.toLowerCase(Locale.ROOT).split("\\W+")))
            .filter((k, w) -> !w.isEmpty())
            .groupBy((k, w) -> w, Grouped.with("words", Serdes.String(), Serdes.String()))
            .count(Materialized.<String, Long>as(Stores.inMemoryKeyValueStore("counts"))
                       .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        Topology topology = b.build();
        System.err.println(topology.describe());

        CountDownLatch stop = new CountDownLatch(1);
        final boolean[] failed = {false};
        try (KafkaStreams streams = new KafkaStreams(topology, p)) {
            streams.setStateListener((to, from) -> {
                emit("state", "from", from.toString(), "to", to.toString());
                if (to == KafkaStreams.State.ERROR) {
                    failed[0] = true;
                    stop.countDown();
                }
            });
            streams.setUncaughtExceptionHandler(e -> {
                emit("error", "error", InteropClient.describe(e));
                e.printStackTrace(System.err);
                return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
            });
            Thread stdin = new Thread(() -> {
                try (BufferedReader r = new BufferedReader(
                         new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                    String line;
                    while ((line = r.readLine()) != null) {
                        if (line.trim().equals("close")) break;
                    }
                } catch (IOException e) {
                    // same as EOF
                }
                stop.countDown();
            }, "stdin");
            stdin.setDaemon(true);
            stdin.start();
            streams.start();
            stop.await();
            streams.close(Duration.ofSeconds(60));
        }
        emit("closed");
        System.exit(failed[0] ? 1 : 0);
    }

    static synchronized void emit(String ev, Object... kv) {
        Object[] all = new Object[kv.length + 4];
        all[0] = "ev";
        all[1] = ev;
        all[2] = "t";
        all[3] = System.currentTimeMillis();
        System.arraycopy(kv, 0, all, 4, kv.length);
        System.out.println(InteropClient.json(InteropClient.obj(all)));
        System.out.flush();
    }
}

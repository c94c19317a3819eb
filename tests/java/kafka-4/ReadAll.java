// Reads topics from the beginning with Kafka's own Java consumer (KafkaConsumer, no group) and
// prints one line per record: topic TAB partition TAB offset TAB base64(key) TAB base64(value)
// ("-" for null). Reads up to the end offsets the partitions had when it started, and at least
// `count` records; fails (exit 2) when that is not done within `timeoutMs`.
// Usage: ReadAll BOOTSTRAP TOPIC[,TOPIC...] COUNT TIMEOUT_MS [CLIENT_PROPERTIES_FILE]
import java.io.FileInputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class ReadAll {
    static String b64(byte[] b) {
        return b == null ? "-" : Base64.getEncoder().encodeToString(b);
    }

    static boolean atEnd(KafkaConsumer<byte[], byte[]> consumer, Map<TopicPartition, Long> ends) {
        for (Map.Entry<TopicPartition, Long> e : ends.entrySet()) {
            if (consumer.position(e.getKey()) < e.getValue()) {
                return false;
            }
        }
        return true;
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        if (args.length > 4) {
            try (FileInputStream in = new FileInputStream(args[4])) {
                props.load(in);
            }
        }
        props.put("bootstrap.servers", args[0]);
        props.put("enable.auto.commit", "false");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        long count = Long.parseLong(args[2]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[3]);
        long seen = 0;
        boolean reachedEnd = false;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> parts = new ArrayList<>();
            for (String topic : args[1].split(",")) {
                List<PartitionInfo> infos = consumer.partitionsFor(topic, Duration.ofMillis(Math.max(1, deadline - System.currentTimeMillis())));
                for (PartitionInfo p : infos) {
                    parts.add(new TopicPartition(topic, p.partition()));
                }
            }
            consumer.assign(parts);
            consumer.seekToBeginning(parts);
            Map<TopicPartition, Long> ends = consumer.endOffsets(parts);
            while ((seen < count || !atEnd(consumer, ends)) && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println(r.topic() + "\t" + r.partition() + "\t" + r.offset() + "\t" + b64(r.key()) + "\t" + b64(r.value()));
                    seen++;
                }
            }
            reachedEnd = atEnd(consumer, ends);
        }
        System.out.flush();
        if (seen < count || !reachedEnd) {
            System.err.println("ReadAll: read " + seen + " of " + count + " records before the timeout (end reached: " + reachedEnd + ")");
            System.exit(2);
        }
    }
}

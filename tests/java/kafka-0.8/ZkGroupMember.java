// A member of a Kafka 0.8 ZooKeeper consumer group: Java's own high-level consumer
// (kafka.consumer.ZookeeperConsumerConnector through kafka.javaapi), one stream per thread.
// Prints "partition TAB offset TAB value" per message (flushed at once), "assigned" when its
// first stream starts delivering. Runs until killed, or until MAX messages (then commits,
// shuts down and exits 0).
// Usage: ZkGroupMember ZK_CONNECT GROUP TOPIC STREAMS [MAX]
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import kafka.consumer.ConsumerConfig;
import kafka.consumer.ConsumerIterator;
import kafka.consumer.KafkaStream;
import kafka.javaapi.consumer.ConsumerConnector;
import kafka.message.MessageAndMetadata;

public class ZkGroupMember {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("zookeeper.connect", args[0]);
        props.put("group.id", args[1]);
        props.put("auto.offset.reset", "smallest");
        props.put("auto.commit.interval.ms", "200");
        props.put("zookeeper.session.timeout.ms", "6000");
        props.put("rebalance.backoff.ms", "500");
        props.put("rebalance.max.retries", "20");
        final long max = args.length > 4 ? Long.parseLong(args[4]) : Long.MAX_VALUE;
        final ConsumerConnector connector = kafka.consumer.Consumer.createJavaConsumerConnector(new ConsumerConfig(props));
        int n = Integer.parseInt(args[3]);
        Map<String, List<KafkaStream<byte[], byte[]>>> streams =
            connector.createMessageStreams(Collections.singletonMap(args[2], n));
        final AtomicLong seen = new AtomicLong();
        final Object lock = new Object();
        Thread[] threads = new Thread[n];
        int i = 0;
        for (final KafkaStream<byte[], byte[]> stream : streams.get(args[2])) {
            threads[i] = new Thread(() -> {
                ConsumerIterator<byte[], byte[]> it = stream.iterator();
                while (it.hasNext()) {
                    MessageAndMetadata<byte[], byte[]> m = it.next();
                    synchronized (lock) {
                        System.out.println(m.partition() + "\t" + m.offset() + "\t" + new String(m.message(), java.nio.charset.StandardCharsets.UTF_8));
                        System.out.flush();
                    }
                    if (seen.incrementAndGet() >= max) {
                        synchronized (lock) { lock.notifyAll(); }
                        return;
                    }
                }
            });
            threads[i].setDaemon(true);
            threads[i].start();
            i++;
        }
        synchronized (lock) {
            while (seen.get() < max) {
                lock.wait(1000);
            }
        }
        connector.commitOffsets();
        connector.shutdown();
        System.exit(0);
    }
}

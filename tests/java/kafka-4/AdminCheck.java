// Kafka's Java AdminClient against a broker, for what the console tools do not print plainly.
// Usage: AdminCheck BOOTSTRAP describe-topics TOPIC[,TOPIC...]   -> topic TAB partition TAB leader TAB replicas TAB isr
//        AdminCheck BOOTSTRAP describe-configs TOPIC             -> name=value per line
//        AdminCheck BOOTSTRAP describe-group GROUP               -> state TAB protocol TAB member-count, then member TAB partitions
// An optional last argument names a client properties file (security settings).
import java.io.FileInputStream;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;

public class AdminCheck {
    static String ids(List<Node> nodes) {
        return nodes.stream().map(n -> Integer.toString(n.id())).collect(Collectors.joining(","));
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        if (args.length > 3) {
            try (FileInputStream in = new FileInputStream(args[3])) {
                props.load(in);
            }
        }
        props.put("bootstrap.servers", args[0]);
        props.put("default.api.timeout.ms", "30000");
        try (Admin admin = Admin.create(props)) {
            switch (args[1]) {
                case "describe-topics": {
                    List<String> topics = Arrays.asList(args[2].split(","));
                    Map<String, TopicDescription> all = admin.describeTopics(topics).allTopicNames().get();
                    for (String t : topics) {
                        for (TopicPartitionInfo p : all.get(t).partitions()) {
                            System.out.println(t + "\t" + p.partition() + "\t" + (p.leader() == null ? -1 : p.leader().id())
                                + "\t" + ids(p.replicas()) + "\t" + ids(p.isr()));
                        }
                    }
                    break;
                }
                case "describe-configs": {
                    ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, args[2]);
                    Config c = admin.describeConfigs(Collections.singleton(r)).all().get().get(r);
                    List<String> lines = new ArrayList<>();
                    c.entries().forEach(e -> lines.add(e.name() + "=" + e.value()));
                    Collections.sort(lines);
                    lines.forEach(System.out::println);
                    break;
                }
                case "describe-group": {
                    ConsumerGroupDescription g = admin.describeConsumerGroups(Collections.singleton(args[2])).all().get().get(args[2]);
                    System.out.println(g.groupState() + "\t" + g.partitionAssignor() + "\t" + g.members().size());
                    for (MemberDescription m : g.members()) {
                        System.out.println(m.consumerId() + "\t" + m.assignment().topicPartitions().stream()
                            .map(tp -> Integer.toString(tp.partition())).sorted().collect(Collectors.joining(",")));
                    }
                    break;
                }
                default:
                    throw new IllegalArgumentException("unknown command " + args[1]);
            }
        }
    }
}

import java.io.File;
import java.io.FileOutputStream;
import java.io.OutputStream;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

/**
 * The suite's HDFS and YARN: Hadoop's own mini cluster (a namenode and a datanode, a resource
 * manager and a node manager) in this one process, on loopback, as Spark's YARN tests start it.
 *
 * Arguments: the directory to write core-site.xml, hdfs-site.xml and yarn-site.xml into (a
 * HADOOP_CONF_DIR for spark-submit), the namenode's port, the node manager's memory (MB) and
 * vcores. Its data goes under the working directory. Prints "ready" when both are up; runs
 * until killed (its shutdown hook stops YARN and its containers).
 */
public final class MiniHadoop {
    public static void main(String[] args) throws Exception {
        try {
            start(args);
        } catch (Throwable failed) {  // the daemons already started would keep the JVM up
            failed.printStackTrace();
            System.exit(1);
        }
        Thread.currentThread().join();
    }

    private static void write(Configuration conf, File file) throws Exception {
        try (OutputStream out = new FileOutputStream(file)) {
            conf.writeXml(out);
        }
    }

    private static void start(String[] args) throws Exception {
        File confDir = new File(args[0]);
        int namenodePort = Integer.parseInt(args[1]);
        Configuration conf = new YarnConfiguration();
        conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File("dfs").getAbsolutePath());
        conf.set("dfs.namenode.rpc-bind-host", "127.0.0.1");
        conf.set("dfs.datanode.address", "127.0.0.1:0");
        conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
        conf.set("dfs.datanode.http.address", "127.0.0.1:0");
        conf.set("dfs.namenode.http-address", "127.0.0.1:0");
        conf.setInt("dfs.replication", 1);
        // Containers as small as a client-mode application's: an application master and an executor.
        conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 128);
        conf.setInt(YarnConfiguration.NM_PMEM_MB, Integer.parseInt(args[2]));
        conf.setInt(YarnConfiguration.NM_VCORES, Integer.parseInt(args[3]));
        conf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
        conf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
        conf.setFloat(YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE, 99.9f);
        // The capacity scheduler's one queue, as Spark's YARN tests set it.
        conf.set("yarn.scheduler.capacity.root.queues", "default");
        conf.set("yarn.scheduler.capacity.root.default.capacity", "100");
        conf.set("yarn.scheduler.capacity.root.default.maximum-capacity", "100");
        conf.set("yarn.scheduler.capacity.root.default.user-limit-factor", "1");
        conf.set("yarn.scheduler.capacity.root.default.state", "RUNNING");
        conf.set("yarn.scheduler.capacity.root.default.acl_submit_applications", "*");
        conf.set("yarn.scheduler.capacity.root.default.acl_administer_queue", "*");
        conf.set("yarn.scheduler.capacity.node-locality-delay", "-1");
        conf.set("yarn.scheduler.capacity.maximum-am-resource-percent", "1.0");

        MiniDFSCluster dfs = new MiniDFSCluster.Builder(conf).nameNodePort(namenodePort).numDataNodes(1)
                .format(true).build();
        dfs.waitActive();
        conf.set("fs.defaultFS", dfs.getURI().toString());
        MiniYARNCluster yarn = new MiniYARNCluster("spark-flow", 1, 1, 1);
        yarn.init(conf);
        yarn.start();
        // Stopped: the node manager ends its containers; HDFS's data is the suite's temporary
        // directory, so it ends with the JVM (its own shutdown takes seconds).
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            yarn.stop();
            Runtime.getRuntime().halt(0);  // Hadoop's own shutdown hooks wait for HDFS's
        }));
        Configuration started = yarn.getConfig();
        // start() can return before the resource manager has put its port in the configuration.
        while (started.get(YarnConfiguration.RM_ADDRESS).endsWith(":0")) {
            Thread.sleep(100);
        }
        // A client's settings only: the cluster's own configuration names test classes (a rack
        // mapping) that a client's class path does not have.
        confDir.mkdirs();
        Configuration core = new Configuration(false);
        core.set("fs.defaultFS", dfs.getURI().toString());
        write(core, new File(confDir, "core-site.xml"));
        Configuration hdfs = new Configuration(false);
        hdfs.set("dfs.replication", "1");
        write(hdfs, new File(confDir, "hdfs-site.xml"));
        Configuration client = new Configuration(false);
        for (String key : new String[] {YarnConfiguration.RM_ADDRESS, YarnConfiguration.RM_SCHEDULER_ADDRESS,
                YarnConfiguration.RM_WEBAPP_ADDRESS, YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS,
                YarnConfiguration.RM_ADMIN_ADDRESS}) {
            client.set(key, started.get(key));
        }
        write(client, new File(confDir, "yarn-site.xml"));
        System.out.println("ready " + dfs.getURI() + " " + started.get(YarnConfiguration.RM_ADDRESS));
        System.out.flush();
    }
}

import java.net.InetSocketAddress;

import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.metastore.HiveMetaStore;
import org.apache.hadoop.hive.metastore.api.ThriftHiveMetastore;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.server.TThreadPoolServer;
import org.apache.thrift.transport.TServerSocket;
import org.apache.thrift.transport.TTransportFactory;

/**
 * Hive 2.3's metastore server from the pyspark wheel's jars, as HiveMetaStore.startMetaStore serves it, but listening
 * on one address (HiveMetaStore binds every interface): the tests' servers listen on loopback only. Run as a
 * single-file program: java -cp "<pyspark>/jars/*:<conf>" LoopbackMetastore.java HOST PORT.
 */
public class LoopbackMetastore {
    public static void main(String[] args) throws Exception {
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        HiveConf conf = new HiveConf(HiveMetaStore.HMSHandler.class);
        ThriftHiveMetastore.Iface handler = HiveMetaStore.newRetryingHMSHandler("laketide test metastore", conf, false);
        TServerSocket socket = new TServerSocket(new InetSocketAddress(host, port));
        TThreadPoolServer.Args serverArgs = new TThreadPoolServer.Args(socket)
            .processor(new ThriftHiveMetastore.Processor<>(handler))
            .transportFactory(new TTransportFactory())
            .protocolFactory(new TBinaryProtocol.Factory())
            .minWorkerThreads(2)
            .maxWorkerThreads(32);
        System.out.println("serving on " + host + ":" + socket.getServerSocket().getLocalPort());
        System.out.flush();
        new TThreadPoolServer(serverArgs).serve();
    }
}

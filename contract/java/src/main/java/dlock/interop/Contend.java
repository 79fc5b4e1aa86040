package dlock.interop;

import java.io.ByteArrayOutputStream;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.api.ACLProvider;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.data.ACL;
import org.redisson.Redisson;
import org.redisson.api.RFencedLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * One contender of the live mixed-language test (contract/tests/contention.rs), in Java with
 * Apache Curator: {@code Contend URL NAME DIR LABEL TARGET [lock|rw|sem]}, as the Rust, Python and
 * Node workers. On a {@code redis://…?compat=redisson} URL (or
 * {@code redis-cluster://host:port,…?compat=redisson}, a Redis Cluster) it takes Redisson's
 * {@code RFencedLock} on NAME (Redisson's RLock with a fencing token from the counter dlock's
 * compat mode shares). On {@code zk://} it uses Curator; with {@code zk://user:password@…} it
 * authenticates as dlock does (digest) and creates its nodes for their creator only. It takes
 * Curator's {@code InterProcessMutex} (mode {@code lock}) or, in mode
 * {@code rw}, the write lock of an {@code InterProcessReadWriteLock} and every third time its
 * read lock, or in mode {@code sem} TARGET times a lease of an {@code InterProcessSemaphoreV2}
 * of 2 leases, held for 5 ms each, on the path a dlock client uses for NAME: {@code /dlock/} +
 * escape(NAME) (+ {@code .rwlock}, {@code .semaphore}) under the URL's chroot. The fencing
 * token is the holder's node sequence number + 1, as dlock computes it (a lease has none: 0).
 * Each write hold does a fenced read-modify-write of DIR/counter; every hold appends
 * {@code token start_ns end_ns outcome} (0 written, 1 refused as stale, 2 target reached, 3 a
 * read hold, 4 a permit) to DIR/LABEL.log. System.nanoTime reads
 * CLOCK_MONOTONIC on Linux, the clock the other workers log.
 */
public final class Contend {
    /** dlock's escape of a lock name into one path component (docs/PROTOCOL.md §10). */
    static String escape(String name) {
        StringBuilder out = new StringBuilder();
        for (byte b : name.getBytes(StandardCharsets.UTF_8)) {
            char c = (char) (b & 0xff);
            if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_') {
                out.append(c);
            } else {
                out.append(String.format("%%%02X", b & 0xff));
            }
        }
        return out.toString();
    }

    /** The fencing token of a held node: its 10-digit sequence number + 1. */
    static long token(String nodePath) {
        return Long.parseLong(nodePath.substring(nodePath.length() - 10)) + 1;
    }

    /** InterProcessMutex keeps its node's path to itself (protected). */
    static final class FencedMutex extends InterProcessMutex {
        FencedMutex(CuratorFramework client, String path) {
            super(client, path);
        }

        long token() {
            return Contend.token(getLockPath());
        }
    }

    static int fencedIncrement(Path counter, long token, long target) throws Exception {
        long count = 0;
        long last = 0;
        if (Files.exists(counter)) {
            String[] fields = Files.readString(counter).trim().split("\\s+");
            count = Long.parseLong(fields[0]);
            last = Long.parseLong(fields[1]);
        }
        if (token <= last) {
            return 1;
        }
        if (count >= target) {
            return 2;
        }
        Files.writeString(counter, (count + 1) + " " + token + "\n");
        return 0;
    }

    /** Waits for DIR/go, as every worker does once it is connected. */
    static void ready(Path dir, String label) throws Exception {
        Files.writeString(dir.resolve(label + ".ready"), "");
        while (!Files.exists(dir.resolve("go"))) {
            Thread.sleep(1);
        }
    }

    static String line(long token, long start, long end, int outcome) {
        return token + " " + start + " " + end + " " + outcome + "\n";
    }

    /** Redisson's RFencedLock on NAME until the counter reaches TARGET. */
    static void redisson(String url, String name, Path dir, String label, long target) throws Exception {
        Config config = new Config();
        String[] hosts = url.substring(url.indexOf("://") + 3).split("[/?]")[0].split(",");
        if (url.startsWith("redis-cluster://")) {
            // Redisson 3.22 and later wake a cluster's waiters by sharded pub/sub (Redis 7).
            for (String host : hosts) {
                config.useClusterServers().addNodeAddress("redis://" + host);
            }
        } else {
            config.useSingleServer().setAddress("redis://" + hosts[0]);
        }
        RedissonClient client = Redisson.create(config);
        RFencedLock lock = client.getFencedLock(name);
        ready(dir, label);
        StringBuilder log = new StringBuilder();
        for (int outcome = 0; outcome != 2; ) {
            long token = lock.lockAndGetToken();
            long start = System.nanoTime();
            outcome = fencedIncrement(dir.resolve("counter"), token, target);
            long end = System.nanoTime();
            lock.unlock();
            log.append(line(token, start, end, outcome));
        }
        Files.writeString(dir.resolve(label + ".log"), log);
        client.shutdown();
    }

    public static void main(String[] args) throws Exception {
        String name = args[1];
        Path dir = Path.of(args[2]);
        String label = args[3];
        long target = Long.parseLong(args[4]);
        String mode = args.length > 5 ? args[5] : "lock";
        boolean rw = mode.equals("rw");
        if (args[0].startsWith("redis")) {
            redisson(args[0], name, dir, label, target);
            return;
        }
        URI url = URI.create(args[0]);
        String chroot = url.getPath() == null ? "" : url.getPath();
        CuratorFrameworkFactory.Builder builder = CuratorFrameworkFactory.builder()
                .connectString(url.getHost() + ":" + url.getPort() + chroot)
                .retryPolicy(new ExponentialBackoffRetry(100, 3))
                // No container directories, which ZooKeeper deletes once empty (dlock pins
                // every directory it uses; this keeps Curator's own tokens growing too).
                .dontUseContainerParents();
        if (url.getUserInfo() != null) {
            // As a dlock client with zk://user:password@…: digest credentials, and nodes
            // only their creator may read and change.
            builder.authorization("digest", url.getUserInfo().getBytes(StandardCharsets.UTF_8))
                    .aclProvider(new ACLProvider() {
                        public List<ACL> getDefaultAcl() {
                            return ZooDefs.Ids.CREATOR_ALL_ACL;
                        }

                        public List<ACL> getAclForPath(String path) {
                            return ZooDefs.Ids.CREATOR_ALL_ACL;
                        }
                    });
        }
        CuratorFramework client = builder.build();
        client.start();
        client.blockUntilConnected();
        String path = "/dlock/" + escape(name);
        FencedMutex mutex = new FencedMutex(client, path);
        InterProcessReadWriteLock rwLock = new InterProcessReadWriteLock(client, path + ".rwlock");
        InterProcessSemaphoreV2 semaphore = new InterProcessSemaphoreV2(client, path + ".semaphore", 2);
        Path counter = dir.resolve("counter");
        ready(dir, label);
        ByteArrayOutputStream log = new ByteArrayOutputStream();
        for (long i = 0; mode.equals("sem") && i < target; i++) {
            Lease lease = semaphore.acquire();
            long start = System.nanoTime();
            Thread.sleep(5);
            long end = System.nanoTime();
            semaphore.returnLease(lease);
            log.writeBytes(line(0, start, end, 4).getBytes(StandardCharsets.UTF_8));
        }
        int outcome = mode.equals("sem") ? 2 : 0;
        for (int i = 0; outcome != 2; i++) {
            long token;
            long start;
            int result;
            if (!rw) {
                mutex.acquire();
                token = mutex.token();
                start = System.nanoTime();
                result = fencedIncrement(counter, token, target);
            } else if (i % 3 == 2) {
                rwLock.readLock().acquire();
                token = token(rwLock.readLock().getLockPath());
                start = System.nanoTime();
                result = 3;
            } else {
                rwLock.writeLock().acquire();
                token = token(rwLock.writeLock().getLockPath());
                start = System.nanoTime();
                result = fencedIncrement(counter, token, target);
            }
            long end = System.nanoTime();
            if (!rw) {
                mutex.release();
            } else if (result == 3) {
                rwLock.readLock().release();
            } else {
                rwLock.writeLock().release();
            }
            if (result != 3) {
                outcome = result;
            }
            log.writeBytes(line(token, start, end, result).getBytes(StandardCharsets.UTF_8));
        }
        Files.write(dir.resolve(label + ".log"), log.toByteArray());
        client.close();
    }
}

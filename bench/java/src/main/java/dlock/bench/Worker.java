package dlock.bench;

import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * The JVM worker of {@code just bench}, with the command line of bench/src/bin/worker.rs:
 * {@code uncontended LIB URL NAME N} and {@code contend LIB URL NAME OUT SECONDS HOLD_US OUTSIDE_US}.
 * Libraries, each with its defaults: {@code redisson} (RLock with a 10 s lease, woken by
 * pub/sub) and {@code curator} (InterProcessMutex on ZooKeeper). System.nanoTime reads
 * CLOCK_MONOTONIC on Linux, the clock the other workers log.
 */
public final class Worker {
    interface Lock {
        void acquire() throws Exception;

        void release() throws Exception;
    }

    static Lock library(String lib, String url, String name) throws Exception {
        int port = URI.create(url).getPort();
        switch (lib) {
            case "redisson": {
                Config config = new Config();
                config.useSingleServer().setAddress("redis://127.0.0.1:" + port);
                RedissonClient client = Redisson.create(config);
                RLock lock = client.getLock(name);
                return new Lock() {
                    public void acquire() {
                        lock.lock(10, TimeUnit.SECONDS);
                    }

                    public void release() {
                        lock.unlock();
                    }
                };
            }
            case "curator": {
                CuratorFramework client = CuratorFrameworkFactory.newClient(
                        "127.0.0.1:" + port, new ExponentialBackoffRetry(100, 3));
                client.start();
                client.blockUntilConnected();
                InterProcessMutex mutex = new InterProcessMutex(client, "/curator/" + name);
                return new Lock() {
                    public void acquire() throws Exception {
                        mutex.acquire();
                    }

                    public void release() throws Exception {
                        mutex.release();
                    }
                };
            }
            default:
                throw new IllegalArgumentException("unknown library " + lib);
        }
    }

    public static void main(String[] args) throws Exception {
        Lock lock = library(args[1], args[2], args[3]);
        if (args[0].equals("uncontended")) {
            int n = Integer.parseInt(args[4]);
            for (int i = 0; i < Math.max(n / 5, 200); i++) { // JIT warm-up
                lock.acquire();
                lock.release();
            }
            StringBuilder samples = new StringBuilder();
            long start = System.nanoTime();
            for (int i = 0; i < n; i++) {
                long t = System.nanoTime();
                lock.acquire();
                lock.release();
                samples.append(i == 0 ? "" : ",").append(System.nanoTime() - t);
            }
            long total = System.nanoTime() - start;
            System.out.println("{\"samples\": [" + samples + "], \"total\": " + total + "}");
            System.exit(0);
        }
        Path out = Path.of(args[4]);
        double seconds = Double.parseDouble(args[5]);
        long holdUs = Long.parseLong(args[6]);
        long outsideUs = Long.parseLong(args[7]);
        Files.writeString(Path.of(out + ".ready"), "");
        Path go = out.getParent().resolve("go");
        while (!Files.exists(go)) {
            Thread.sleep(1);
        }
        long deadline = System.nanoTime() + (long) (seconds * 1e9);
        List<String> lines = new ArrayList<>();
        while (System.nanoTime() < deadline) {
            long requested = System.nanoTime();
            lock.acquire();
            long acquired = System.nanoTime();
            TimeUnit.MICROSECONDS.sleep(holdUs);
            long released = System.nanoTime();
            lock.release();
            lines.add(requested + " " + acquired + " " + released + "\n");
            TimeUnit.MICROSECONDS.sleep(outsideUs);
        }
        Files.writeString(out, String.join("", lines));
        System.exit(0);
    }
}

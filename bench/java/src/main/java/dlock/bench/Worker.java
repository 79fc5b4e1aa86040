package dlock.bench;

import java.lang.management.ManagementFactory;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import net.javacrumbs.shedlock.core.ClockProvider;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.SimpleLock;
import net.javacrumbs.shedlock.provider.jdbctemplate.JdbcTemplateLockProvider;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;
import org.springframework.integration.jdbc.lock.DefaultLockRepository;
import org.springframework.integration.jdbc.lock.JdbcLockRegistry;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

/**
 * The JVM worker of {@code just bench}, with the command line of bench/src/bin/worker.rs:
 * {@code uncontended LIB URL NAME N [WARMUP]}, {@code contend LIB URL NAME OUT SECONDS HOLD_US OUTSIDE_US} and
 * {@code capacity LIB URL PREFIX SECONDS TASKS LOCKS} (TASKS threads of one client).
 * Libraries, each with its defaults: {@code redisson} (RLock with a 10 s lease, woken by
 * pub/sub), {@code curator} (InterProcessMutex on ZooKeeper), and on {@code postgres://} or
 * {@code mysql://} URLs (a HikariCP pool): {@code jdbc-lock-registry} (Spring Integration's
 * JdbcLockRegistry: a row per lock, tried again every 100 ms while busy) and {@code shedlock}
 * (JdbcTemplateLockProvider, 10 s lockAtMostFor; ShedLock never waits, so the worker tries
 * again every 100 ms, JdbcLockRegistry's interval). System.nanoTime reads CLOCK_MONOTONIC on
 * Linux, the clock the other workers log.
 */
public final class Worker {
    interface Lock {
        void acquire() throws Exception;

        void release() throws Exception;
    }

    /** One client of the library, and the lock of each name on it. */
    static Function<String, Lock> library(String lib, String url) throws Exception {
        int port = URI.create(url).getPort();
        switch (lib) {
            case "redisson": {
                Config config = new Config();
                config.useSingleServer().setAddress("redis://127.0.0.1:" + port);
                RedissonClient client = Redisson.create(config);
                return name -> new Lock() {
                    final RLock lock = client.getLock(name);

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
                return name -> new Lock() {
                    final InterProcessMutex mutex = new InterProcessMutex(client, "/curator/" + name);

                    public void acquire() throws Exception {
                        mutex.acquire();
                    }

                    public void release() throws Exception {
                        mutex.release();
                    }
                };
            }
            case "jdbc-lock-registry": {
                HikariDataSource ds = dataSource(url);
                boolean postgres = url.startsWith("postgres");
                // INT_LOCK as spring-integration-jdbc's schema-postgresql.sql / schema-mysql.sql
                // create it.
                new JdbcTemplate(ds).execute("CREATE TABLE IF NOT EXISTS INT_LOCK ("
                        + " LOCK_KEY CHAR(36) NOT NULL, REGION VARCHAR(100) NOT NULL,"
                        + " CLIENT_ID CHAR(36), CREATED_DATE " + (postgres ? "TIMESTAMP" : "DATETIME(6)")
                        + " NOT NULL, CONSTRAINT INT_LOCK_PK PRIMARY KEY (LOCK_KEY, REGION))");
                DefaultLockRepository repository = new DefaultLockRepository(ds);
                repository.setTransactionManager(new DataSourceTransactionManager(ds));
                repository.afterPropertiesSet();
                repository.afterSingletonsInstantiated();
                JdbcLockRegistry registry = new JdbcLockRegistry(repository);
                return name -> new Lock() {
                    final java.util.concurrent.locks.Lock lock = registry.obtain(name);

                    public void acquire() {
                        lock.lock();
                    }

                    public void release() {
                        lock.unlock();
                    }
                };
            }
            case "shedlock": {
                HikariDataSource ds = dataSource(url);
                boolean postgres = url.startsWith("postgres");
                String time = postgres ? "TIMESTAMP" : "TIMESTAMP(3)";
                new JdbcTemplate(ds).execute("CREATE TABLE IF NOT EXISTS shedlock ("
                        + " name VARCHAR(64) NOT NULL, lock_until " + time + " NOT NULL,"
                        + " locked_at " + time + " NOT NULL, locked_by VARCHAR(255) NOT NULL,"
                        + " PRIMARY KEY (name))");
                JdbcTemplateLockProvider provider = new JdbcTemplateLockProvider(
                        JdbcTemplateLockProvider.Configuration.builder()
                                .withJdbcTemplate(new JdbcTemplate(ds))
                                .build());
                return name -> new Lock() {
                    SimpleLock held;

                    public void acquire() throws InterruptedException {
                        while (true) {
                            // ShedLock's own clock, as its executors take it: truncated to the
                            // millisecond. With Instant.now() (microseconds) a lock released and
                            // taken again within one millisecond is refused on PostgreSQL, whose
                            // TIMESTAMP keeps the released lock_until's microseconds.
                            LockConfiguration config = new LockConfiguration(
                                    ClockProvider.now(), name, Duration.ofSeconds(10), Duration.ZERO);
                            Optional<SimpleLock> got = provider.lock(config);
                            if (got.isPresent()) {
                                held = got.get();
                                return;
                            }
                            Thread.sleep(100);
                        }
                    }

                    public void release() {
                        held.unlock();
                    }
                };
            }
            default:
                throw new IllegalArgumentException("unknown library " + lib);
        }
    }

    /** A HikariCP pool (its defaults) for a dlock SQL URL: postgres://user@host:port/db or mysql://…. */
    static HikariDataSource dataSource(String url) {
        URI uri = URI.create(url);
        String driver = uri.getScheme().startsWith("postgres") ? "postgresql" : "mariadb";
        HikariConfig config = new HikariConfig();
        config.setJdbcUrl("jdbc:" + driver + "://" + uri.getHost() + ":" + uri.getPort() + uri.getPath());
        String[] user = uri.getUserInfo().split(":", 2);
        config.setUsername(user[0]);
        if (user.length > 1) {
            config.setPassword(user[1]);
        }
        return new HikariDataSource(config);
    }

    /** TASKS threads take disjoint shares of LOCKS locks over and over for SECONDS. */
    static void capacity(Function<String, Lock> locks, String prefix, double seconds, int tasks, int count)
            throws Exception {
        long start = System.nanoTime();
        long deadline = start + (long) (seconds * 1e9);
        AtomicLong cycles = new AtomicLong();
        List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < tasks; t++) {
            List<Lock> mine = new ArrayList<>();
            for (int i = t; i < count; i += tasks) {
                mine.add(locks.apply(prefix + "/" + i));
            }
            Thread thread = new Thread(() -> {
                try {
                    while (!mine.isEmpty() && System.nanoTime() < deadline) {
                        for (Lock lock : mine) {
                            lock.acquire();
                            lock.release();
                            cycles.incrementAndGet();
                        }
                    }
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            thread.start();
            threads.add(thread);
        }
        for (Thread thread : threads) {
            thread.join();
        }
        double took = (System.nanoTime() - start) / 1e9;
        System.out.println("{\"cycles\": " + cycles.get() + ", \"seconds\": " + took + "}");
    }

    public static void main(String[] args) throws Exception {
        Function<String, Lock> locks = library(args[1], args[2]);
        if (args[0].equals("capacity")) {
            capacity(locks, args[3], Double.parseDouble(args[4]), Integer.parseInt(args[5]),
                    Integer.parseInt(args[6]));
            System.exit(0);
        }
        Lock lock = locks.apply(args[3]);
        if (args[0].equals("uncontended")) {
            int n = Integer.parseInt(args[4]);
            int warmup = args.length > 5 ? Integer.parseInt(args[5]) : 1; // see worker.rs
            for (int i = 0; i < warmup; i++) {
                lock.acquire();
                lock.release();
            }
            StringBuilder samples = new StringBuilder();
            // The process's CPU time, every thread (the JIT's and the collector's included).
            var os = (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
            long start = System.nanoTime();
            long cpu = os.getProcessCpuTime();
            for (int i = 0; i < n; i++) {
                long t = System.nanoTime();
                lock.acquire();
                lock.release();
                samples.append(i == 0 ? "" : ",").append(System.nanoTime() - t);
            }
            long total = System.nanoTime() - start;
            cpu = os.getProcessCpuTime() - cpu;
            System.out.println("{\"samples\": [" + samples + "], \"total\": " + total + ", \"cpu\": " + cpu + "}");
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
            // Held for exactly holdUs (a spin on the monotonic clock: a sleep rounds it up).
            while (System.nanoTime() < acquired + holdUs * 1000) {
                Thread.onSpinWait();
            }
            long released = System.nanoTime();
            lock.release();
            lines.add(requested + " " + acquired + " " + released + "\n");
            TimeUnit.MICROSECONDS.sleep(outsideUs);
        }
        Files.writeString(out, String.join("", lines));
        System.exit(0);
    }
}

-- dlock SQL protocol v1 for MariaDB 10.6+ and MySQL 8 (PROTOCOL.md §18). `dlock_` stands for
-- the table prefix. Statements are separated by lines of `--;`. Every procedure is the Lua
-- script of the same name (§6, §16, §17) run by the database, as on PostgreSQL: it takes the lock name
-- where the script takes its keys, the same arguments, and selects the script's reply as one
-- row. Each runs one short READ COMMITTED transaction that first locks the name's row, so one
-- name's operations run one at a time; the server's clock (UTC_TIMESTAMP(6), read after that
-- lock) writes and compares every expiry. There is no NOTIFY: waiters look (§18, wake-ups).

-- One row per name and kind (`lock`, `semaphore`, `rwlock`), kept after release: the latest
-- fencing token of the name and kind, and the tenure that holds it alone — a lock's holder or
-- a read-write lock's writer (owner token, NULL when free; hold count; lease end, UTC). A
-- semaphore's row holds nobody: it keeps the number of permits.
CREATE TABLE IF NOT EXISTS dlock_lock (
    name       VARBINARY(1024) NOT NULL,
    kind       VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    owner      VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
    holds      INT NOT NULL DEFAULT 0,
    fence      BIGINT NOT NULL DEFAULT 0,
    expires_at DATETIME(6) NULL,
    permits    INT NULL,
    PRIMARY KEY (name, kind)
) ENGINE = InnoDB
--;
-- The holders that share a name: a semaphore's permits and a read-write lock's readers.
CREATE TABLE IF NOT EXISTS dlock_holder (
    name       VARBINARY(1024) NOT NULL,
    kind       VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    owner      VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    holds      INT NOT NULL,
    fence      BIGINT NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    PRIMARY KEY (name, kind, owner)
) ENGINE = InnoDB
--;
-- The waiters of each name and kind in FIFO order (ticket), each until its waiter-lease
-- deadline (UTC); a read-write lock's waiters say what they wait for (`read` or `write`).
CREATE TABLE IF NOT EXISTS dlock_waiter (
    ticket     BIGINT NOT NULL AUTO_INCREMENT,
    name       VARBINARY(1024) NOT NULL,
    kind       VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    owner      VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    mode       VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NULL,
    PRIMARY KEY (ticket),
    UNIQUE KEY waiter_owner (name, kind, owner),
    KEY waiter_queue (name, kind, ticket)
) ENGINE = InnoDB
--;
-- Fencing tokens: a counter row for every name, so a token never repeats when a row is
-- deleted. Not AUTO_INCREMENT, which InnoDB may hand out again after a crash.
CREATE TABLE IF NOT EXISTS dlock_fence (
    id    TINYINT NOT NULL,
    value BIGINT NOT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB
--;
INSERT IGNORE INTO dlock_fence (id, value) VALUES (1, 0)
--;
DROP PROCEDURE IF EXISTS dlock_row_v1
--;
-- Locks the row of a name and kind, creating it free if missing.
CREATE PROCEDURE dlock_row_v1(IN p_name VARBINARY(1024), IN p_kind VARCHAR(16))
BEGIN
    DECLARE found INT DEFAULT 0;
    SELECT 1 INTO found FROM dlock_lock WHERE name = p_name AND kind = p_kind FOR UPDATE;
    IF found = 0 THEN
        INSERT IGNORE INTO dlock_lock (name, kind) VALUES (p_name, p_kind);
        SELECT 1 INTO found FROM dlock_lock WHERE name = p_name AND kind = p_kind FOR UPDATE;
    END IF;
END
--;
DROP PROCEDURE IF EXISTS dlock_reply_v1
--;
-- Selects a reply of `n` integers (1 to 3) as one row.
CREATE PROCEDURE dlock_reply_v1(IN n INT, IN r1 BIGINT, IN r2 BIGINT, IN r3 BIGINT)
BEGIN
    IF n = 1 THEN
        SELECT r1;
    ELSEIF n = 2 THEN
        SELECT r1, r2;
    ELSE
        SELECT r1, r2, r3;
    END IF;
END
--;
DROP PROCEDURE IF EXISTS dlock_live_head_v1
--;
-- The first live waiter of a name and kind, its deadline and mode, dropping dead ones ahead.
CREATE PROCEDURE dlock_live_head_v1(IN p_name VARBINARY(1024), IN p_kind VARCHAR(16),
    IN t DATETIME(6), OUT o_head VARCHAR(64), OUT o_deadline DATETIME(6), OUT o_mode VARCHAR(8))
BEGIN
    scan: LOOP
        SET o_head = NULL, o_deadline = NULL, o_mode = NULL;
        SELECT owner, expires_at, mode INTO o_head, o_deadline, o_mode FROM dlock_waiter
            WHERE name = p_name AND kind = p_kind ORDER BY ticket LIMIT 1;
        IF o_head IS NULL OR o_deadline > t THEN
            LEAVE scan;
        END IF;
        DELETE FROM dlock_waiter WHERE name = p_name AND kind = p_kind AND owner = o_head;
    END LOOP;
END
--;
DROP PROCEDURE IF EXISTS dlock_enqueue_v1
--;
-- Queues `p_owner` (or renews its place) until `p_until`.
CREATE PROCEDURE dlock_enqueue_v1(IN p_name VARBINARY(1024), IN p_kind VARCHAR(16),
    IN p_owner VARCHAR(64), IN p_until DATETIME(6), IN p_mode VARCHAR(8))
BEGIN
    INSERT INTO dlock_waiter (name, kind, owner, expires_at, mode)
        VALUES (p_name, p_kind, p_owner, p_until, p_mode)
        ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at), mode = VALUES(mode);
END
--;
DROP PROCEDURE IF EXISTS dlock_next_fence_v1
--;
-- The fencing token of a new tenure of a name and kind, recorded in its row.
CREATE PROCEDURE dlock_next_fence_v1(IN p_name VARBINARY(1024), IN p_kind VARCHAR(16),
    OUT o_fence BIGINT)
BEGIN
    DECLARE counter BIGINT DEFAULT 0;
    DECLARE latest BIGINT DEFAULT 0;
    SELECT value INTO counter FROM dlock_fence WHERE id = 1 FOR UPDATE;
    SELECT fence INTO latest FROM dlock_lock WHERE name = p_name AND kind = p_kind;
    SET o_fence = GREATEST(counter, latest) + 1;
    INSERT INTO dlock_fence (id, value) VALUES (1, o_fence)
        ON DUPLICATE KEY UPDATE value = o_fence;
    UPDATE dlock_lock SET fence = o_fence WHERE name = p_name AND kind = p_kind;
END
--;
DROP PROCEDURE IF EXISTS dlock_grant_v1
--;
-- Makes `p_owner` the row's holder in a new tenure lasting until `p_until`; its token.
CREATE PROCEDURE dlock_grant_v1(IN p_name VARBINARY(1024), IN p_kind VARCHAR(16),
    IN p_owner VARCHAR(64), IN p_until DATETIME(6), OUT o_fence BIGINT)
BEGIN
    CALL dlock_next_fence_v1(p_name, p_kind, o_fence);
    UPDATE dlock_lock SET owner = p_owner, holds = 1, expires_at = p_until
        WHERE name = p_name AND kind = p_kind;
END
--;
DROP PROCEDURE IF EXISTS dlock_grant_hold_v1
--;
-- Makes `p_owner` one of the holders (a permit, a reader) in a new tenure lasting until
-- `p_until`; its token.
CREATE PROCEDURE dlock_grant_hold_v1(IN p_name VARBINARY(1024), IN p_kind VARCHAR(16),
    IN p_owner VARCHAR(64), IN p_until DATETIME(6), OUT o_fence BIGINT)
BEGIN
    CALL dlock_next_fence_v1(p_name, p_kind, o_fence);
    INSERT INTO dlock_holder (name, kind, owner, holds, fence, expires_at)
        VALUES (p_name, p_kind, p_owner, 1, o_fence, p_until)
        ON DUPLICATE KEY UPDATE holds = 1, fence = VALUES(fence), expires_at = VALUES(expires_at);
END
--;
DROP PROCEDURE IF EXISTS dlock_stretch_v1
--;
-- The row's tenure if `p_owner` holds it: now at `p_count` holds and lasting until `p_until`
-- at least (a lease never shrinks); its token, or NULL.
CREATE PROCEDURE dlock_stretch_v1(IN p_name VARBINARY(1024), IN p_kind VARCHAR(16),
    IN p_owner VARCHAR(64), IN p_count BIGINT, IN t DATETIME(6), IN p_until DATETIME(6),
    OUT o_fence BIGINT)
BEGIN
    SET o_fence = NULL;
    SELECT fence INTO o_fence FROM dlock_lock
        WHERE name = p_name AND kind = p_kind AND owner = p_owner AND expires_at > t;
    IF o_fence IS NOT NULL THEN
        UPDATE dlock_lock SET holds = p_count, expires_at = GREATEST(expires_at, p_until)
            WHERE name = p_name AND kind = p_kind;
    END IF;
END
--;
DROP PROCEDURE IF EXISTS dlock_stretch_hold_v1
--;
-- The same for one of the holders.
CREATE PROCEDURE dlock_stretch_hold_v1(IN p_name VARBINARY(1024), IN p_kind VARCHAR(16),
    IN p_owner VARCHAR(64), IN p_count BIGINT, IN t DATETIME(6), IN p_until DATETIME(6),
    OUT o_fence BIGINT)
BEGIN
    SET o_fence = NULL;
    SELECT fence INTO o_fence FROM dlock_holder
        WHERE name = p_name AND kind = p_kind AND owner = p_owner AND expires_at > t;
    IF o_fence IS NOT NULL THEN
        UPDATE dlock_holder SET holds = p_count, expires_at = GREATEST(expires_at, p_until)
            WHERE name = p_name AND kind = p_kind AND owner = p_owner;
    END IF;
END
--;
DROP PROCEDURE IF EXISTS dlock_live_holders_v1
--;
-- The holders whose lease lives, after dropping the others: how many, and the least and the
-- most milliseconds one has left (-2: none).
CREATE PROCEDURE dlock_live_holders_v1(IN p_name VARBINARY(1024), IN p_kind VARCHAR(16),
    IN t DATETIME(6), OUT o_held BIGINT, OUT o_soonest BIGINT, OUT o_last BIGINT)
BEGIN
    DELETE FROM dlock_holder WHERE name = p_name AND kind = p_kind AND expires_at <= t;
    SELECT COUNT(*),
           COALESCE(MIN(FLOOR(TIMESTAMPDIFF(MICROSECOND, t, expires_at) / 1000)), -2),
           COALESCE(MAX(FLOOR(TIMESTAMPDIFF(MICROSECOND, t, expires_at) / 1000)), -2)
        INTO o_held, o_soonest, o_last
        FROM dlock_holder WHERE name = p_name AND kind = p_kind;
END
--;
DROP PROCEDURE IF EXISTS dlock_free_v1
--;
-- Ends the row's tenure.
CREATE PROCEDURE dlock_free_v1(IN p_name VARBINARY(1024), IN p_kind VARCHAR(16))
BEGIN
    UPDATE dlock_lock SET owner = NULL, holds = 0, expires_at = NULL
        WHERE name = p_name AND kind = p_kind;
END
--;
DROP PROCEDURE IF EXISTS dlock_hand_off_v1
--;
-- Hands a free lock to the first live waiter for the rest of its waiter lease; 1 if one got it.
-- Nobody is woken: the waiter finds the lock its own when it next looks.
CREATE PROCEDURE dlock_hand_off_v1(IN p_name VARBINARY(1024), IN t DATETIME(6),
    OUT o_handed BIGINT)
BEGIN
    DECLARE head VARCHAR(64);
    DECLARE deadline DATETIME(6);
    DECLARE w_mode VARCHAR(8);
    DECLARE f BIGINT;
    CALL dlock_live_head_v1(p_name, 'lock', t, head, deadline, w_mode);
    IF head IS NULL THEN
        CALL dlock_free_v1(p_name, 'lock');
        SET o_handed = 0;
    ELSE
        DELETE FROM dlock_waiter WHERE name = p_name AND kind = 'lock' AND owner = head;
        CALL dlock_grant_v1(p_name, 'lock', head, deadline, f);
        SET o_handed = 1;
    END IF;
END
--;
DROP PROCEDURE IF EXISTS dlock_acquire_v1
--;
-- ACQUIRE: as acquire.lua. Selects (1, fencing token, count) acquired | (0, pttl) busy |
-- (3) not queued | (2, pttl, latest fencing token) queued.
CREATE PROCEDURE dlock_acquire_v1(IN p_name VARBINARY(1024), IN p_token VARCHAR(64),
    IN p_lease BIGINT, IN p_count BIGINT, IN p_mode VARCHAR(16), IN p_wlease BIGINT,
    IN p_flag VARCHAR(16))
BEGIN
    DECLARE l_owner VARCHAR(64);
    DECLARE l_fence BIGINT;
    DECLARE l_expires DATETIME(6);
    DECLARE t, l_until DATETIME(6);
    DECLARE head VARCHAR(64);
    DECLARE deadline DATETIME(6);
    DECLARE w_mode VARCHAR(8);
    DECLARE n INT DEFAULT 0;
    DECLARE r1, r2, r3 BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    CALL dlock_row_v1(p_name, 'lock');
    SET t = UTC_TIMESTAMP(6);
    SET l_until = t + INTERVAL p_lease * 1000 MICROSECOND;
    body: BEGIN
        -- Ours already: a reentrant acquire, a retry, or the claim of a hand-off.
        CALL dlock_stretch_v1(p_name, 'lock', p_token, p_count, t, l_until, r2);
        IF r2 IS NOT NULL THEN
            SET n = 3, r1 = 1, r3 = p_count;
            LEAVE body;
        END IF;
        IF p_mode = 'refresh' AND NOT EXISTS (SELECT 1 FROM dlock_waiter
            WHERE name = p_name AND kind = 'lock' AND owner = p_token) THEN
            SET n = 1, r1 = 3;
            LEAVE body;
        END IF;
        SELECT owner, fence, expires_at INTO l_owner, l_fence, l_expires FROM dlock_lock
            WHERE name = p_name AND kind = 'lock';
        IF l_owner IS NULL OR l_expires <= t THEN
            CALL dlock_live_head_v1(p_name, 'lock', t, head, deadline, w_mode);
            IF head IS NULL OR head = p_token OR p_flag = 'barge' THEN
                DELETE FROM dlock_waiter WHERE name = p_name AND kind = 'lock'
                    AND owner = p_token;
                CALL dlock_grant_v1(p_name, 'lock', p_token, l_until, r2);
                SET n = 3, r1 = 1, r3 = 1;
                LEAVE body;
            END IF;
        END IF;
        SET r2 = IF(l_owner IS NULL OR l_expires <= t, -2,
            FLOOR(TIMESTAMPDIFF(MICROSECOND, t, l_expires) / 1000));
        IF p_mode = 'try' THEN
            SET n = 2, r1 = 0;
            LEAVE body;
        END IF;
        CALL dlock_enqueue_v1(p_name, 'lock', p_token,
            t + INTERVAL p_wlease * 1000 MICROSECOND, NULL);
        SET n = 3, r1 = 2, r3 = l_fence;
    END;
    COMMIT;
    CALL dlock_reply_v1(n, r1, r2, r3);
END
--;
DROP PROCEDURE IF EXISTS dlock_release_held_v1
--;
-- RELEASE's work inside the caller's transaction: its reply as (n, r1, r2).
CREATE PROCEDURE dlock_release_held_v1(IN p_name VARBINARY(1024), IN p_token VARCHAR(64),
    IN p_count BIGINT, IN p_flag VARCHAR(16), OUT n INT, OUT r1 BIGINT, OUT r2 BIGINT)
BEGIN
    DECLARE l_owner VARCHAR(64);
    DECLARE l_expires DATETIME(6);
    DECLARE t DATETIME(6);
    SET n = 2, r2 = NULL;
    CALL dlock_row_v1(p_name, 'lock');
    SET t = UTC_TIMESTAMP(6);
    SELECT owner, expires_at INTO l_owner, l_expires FROM dlock_lock
        WHERE name = p_name AND kind = 'lock';
    IF l_owner IS NULL OR l_owner <> p_token OR l_expires <= t THEN
        SET n = 1, r1 = 0;
    ELSEIF p_count > 0 THEN
        UPDATE dlock_lock SET holds = p_count WHERE name = p_name AND kind = 'lock';
        SET r1 = 1, r2 = p_count;
    ELSEIF p_flag = 'free' THEN
        CALL dlock_free_v1(p_name, 'lock');
        SET r1 = 2, r2 = 0;
    ELSE
        CALL dlock_hand_off_v1(p_name, t, r2);
        SET r1 = 2;
    END IF;
END
--;
DROP PROCEDURE IF EXISTS dlock_release_v1
--;
-- RELEASE: as release.lua. Selects (0) not the owner | (1, count) still held |
-- (2, handed) freed (handed: 1 if a waiter got it).
CREATE PROCEDURE dlock_release_v1(IN p_name VARBINARY(1024), IN p_token VARCHAR(64),
    IN p_count BIGINT, IN p_flag VARCHAR(16))
BEGIN
    DECLARE n INT;
    DECLARE r1, r2 BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    CALL dlock_release_held_v1(p_name, p_token, p_count, p_flag, n, r1, r2);
    COMMIT;
    CALL dlock_reply_v1(n, r1, r2, NULL);
END
--;
DROP PROCEDURE IF EXISTS dlock_dequeue_v1
--;
-- DEQUEUE: as dequeue.lua. Selects (2) if the lock had been handed to the waiter (now passed
-- on), (1) if it left the queue, (0) otherwise.
CREATE PROCEDURE dlock_dequeue_v1(IN p_name VARBINARY(1024), IN p_token VARCHAR(64))
BEGIN
    DECLARE t DATETIME(6);
    DECLARE r1, handed BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    CALL dlock_row_v1(p_name, 'lock');
    SET t = UTC_TIMESTAMP(6);
    IF EXISTS (SELECT 1 FROM dlock_lock WHERE name = p_name AND kind = 'lock'
        AND owner = p_token AND expires_at > t) THEN
        CALL dlock_hand_off_v1(p_name, t, handed);
        SET r1 = 2;
    ELSE
        DELETE FROM dlock_waiter WHERE name = p_name AND kind = 'lock' AND owner = p_token;
        SET r1 = ROW_COUNT();
    END IF;
    COMMIT;
    CALL dlock_reply_v1(1, r1, NULL, NULL);
END
--;
DROP PROCEDURE IF EXISTS dlock_hand_permits_v1
--;
-- Hands up to `p_free` permits to the first live waiters, one each, as hand_off does a lock;
-- how many were handed.
CREATE PROCEDURE dlock_hand_permits_v1(IN p_name VARBINARY(1024), IN p_free BIGINT,
    IN t DATETIME(6), OUT o_handed BIGINT)
BEGIN
    DECLARE head VARCHAR(64);
    DECLARE deadline DATETIME(6);
    DECLARE w_mode VARCHAR(8);
    DECLARE f BIGINT;
    SET o_handed = 0;
    hand: WHILE o_handed < p_free DO
        CALL dlock_live_head_v1(p_name, 'semaphore', t, head, deadline, w_mode);
        IF head IS NULL THEN
            LEAVE hand;
        END IF;
        DELETE FROM dlock_waiter WHERE name = p_name AND kind = 'semaphore' AND owner = head;
        CALL dlock_grant_hold_v1(p_name, 'semaphore', head, deadline, f);
        SET o_handed = o_handed + 1;
    END WHILE;
END
--;
DROP PROCEDURE IF EXISTS dlock_give_back_v1
--;
-- Gives back the permit of `p_token`. A fair release hands the permits now free to the first
-- waiters ('free' hands none: the first waiter finds the permit when it next looks); how many
-- were handed.
CREATE PROCEDURE dlock_give_back_v1(IN p_name VARBINARY(1024), IN p_token VARCHAR(64),
    IN p_flag VARCHAR(16), IN t DATETIME(6), OUT o_handed BIGINT)
BEGIN
    DECLARE held, soonest, longest, n_permits BIGINT;
    DELETE FROM dlock_holder WHERE name = p_name AND kind = 'semaphore' AND owner = p_token;
    SET o_handed = 0;
    IF p_flag <> 'free' THEN
        CALL dlock_live_holders_v1(p_name, 'semaphore', t, held, soonest, longest);
        SELECT COALESCE(l.permits, 0) INTO n_permits FROM dlock_lock l
            WHERE l.name = p_name AND l.kind = 'semaphore';
        CALL dlock_hand_permits_v1(p_name, n_permits - held, t, o_handed);
    END IF;
END
--;
DROP PROCEDURE IF EXISTS dlock_permit_acquire_v1
--;
-- PERMIT-ACQUIRE: as permit_acquire.lua. Selects as ACQUIRE, or (4, permits) when the
-- semaphore is in use with another number of permits.
CREATE PROCEDURE dlock_permit_acquire_v1(IN p_name VARBINARY(1024), IN p_token VARCHAR(64),
    IN p_lease BIGINT, IN p_permits BIGINT, IN p_mode VARCHAR(16), IN p_wlease BIGINT,
    IN p_flag VARCHAR(16))
BEGIN
    DECLARE t, l_until DATETIME(6);
    DECLARE set_permits, held, soonest, longest, handed, n_free BIGINT;
    DECLARE head VARCHAR(64);
    DECLARE deadline DATETIME(6);
    DECLARE w_mode VARCHAR(8);
    DECLARE n INT DEFAULT 0;
    DECLARE r1, r2, r3 BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    CALL dlock_row_v1(p_name, 'semaphore');
    SET t = UTC_TIMESTAMP(6);
    SET l_until = t + INTERVAL p_lease * 1000 MICROSECOND;
    body: BEGIN
        -- Ours already: a retry, or the claim of a hand-off.
        CALL dlock_stretch_hold_v1(p_name, 'semaphore', p_token, 1, t, l_until, r2);
        IF r2 IS NOT NULL THEN
            SET n = 3, r1 = 1, r3 = 1;
            LEAVE body;
        END IF;
        IF p_mode = 'refresh' AND NOT EXISTS (SELECT 1 FROM dlock_waiter
            WHERE name = p_name AND kind = 'semaphore' AND owner = p_token) THEN
            SET n = 1, r1 = 3;
            LEAVE body;
        END IF;
        CALL dlock_live_holders_v1(p_name, 'semaphore', t, held, soonest, longest);
        SELECT l.permits INTO set_permits FROM dlock_lock l
            WHERE l.name = p_name AND l.kind = 'semaphore';
        IF set_permits IS NULL OR set_permits <> p_permits THEN
            -- The number of permits is the semaphore's while anyone holds or waits.
            CALL dlock_live_head_v1(p_name, 'semaphore', t, head, deadline, w_mode);
            IF held > 0 OR head IS NOT NULL THEN
                SET n = 2, r1 = 4, r2 = COALESCE(set_permits, 0);
                LEAVE body;
            END IF;
            UPDATE dlock_lock SET permits = p_permits
                WHERE name = p_name AND kind = 'semaphore';
        END IF;
        SET n_free = p_permits - held;
        IF n_free > 0 AND p_flag = 'barge' THEN
            DELETE FROM dlock_waiter WHERE name = p_name AND kind = 'semaphore'
                AND owner = p_token;
            CALL dlock_grant_hold_v1(p_name, 'semaphore', p_token, l_until, r2);
            SET n = 3, r1 = 1, r3 = 1;
            LEAVE body;
        END IF;
        -- Permits that ran out go to the first waiters (perhaps this one), then to newcomers.
        CALL dlock_hand_permits_v1(p_name, n_free, t, handed);
        SET n_free = n_free - handed;
        CALL dlock_stretch_hold_v1(p_name, 'semaphore', p_token, 1, t, l_until, r2);
        IF r2 IS NOT NULL THEN
            SET n = 3, r1 = 1, r3 = 1;
            LEAVE body;
        END IF;
        IF n_free > 0 THEN
            CALL dlock_grant_hold_v1(p_name, 'semaphore', p_token, l_until, r2);
            SET n = 3, r1 = 1, r3 = 1;
            LEAVE body;
        END IF;
        CALL dlock_live_holders_v1(p_name, 'semaphore', t, held, soonest, longest);
        SET r2 = soonest;
        IF p_mode = 'try' THEN
            SET n = 2, r1 = 0;
            LEAVE body;
        END IF;
        CALL dlock_enqueue_v1(p_name, 'semaphore', p_token,
            t + INTERVAL p_wlease * 1000 MICROSECOND, NULL);
        SELECT l.fence INTO r3 FROM dlock_lock l WHERE l.name = p_name AND l.kind = 'semaphore';
        SET n = 3, r1 = 2;
    END;
    COMMIT;
    CALL dlock_reply_v1(n, r1, r2, r3);
END
--;
DROP PROCEDURE IF EXISTS dlock_permit_release_v1
--;
-- PERMIT-RELEASE: as permit_release.lua. Selects (0) not the owner | (2, handed) freed
-- (handed: permits passed on to waiters).
CREATE PROCEDURE dlock_permit_release_v1(IN p_name VARBINARY(1024), IN p_token VARCHAR(64),
    IN p_flag VARCHAR(16))
BEGIN
    DECLARE t DATETIME(6);
    DECLARE n INT DEFAULT 1;
    DECLARE r1, r2 BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    CALL dlock_row_v1(p_name, 'semaphore');
    SET t = UTC_TIMESTAMP(6);
    SET r1 = 0;
    IF EXISTS (SELECT 1 FROM dlock_holder WHERE name = p_name AND kind = 'semaphore'
        AND owner = p_token AND expires_at > t) THEN
        CALL dlock_give_back_v1(p_name, p_token, p_flag, t, r2);
        SET n = 2, r1 = 2;
    END IF;
    COMMIT;
    CALL dlock_reply_v1(n, r1, r2, NULL);
END
--;
DROP PROCEDURE IF EXISTS dlock_permit_dequeue_v1
--;
-- PERMIT-DEQUEUE: as permit_dequeue.lua. Selects (2) if a permit had been handed to the
-- waiter (now passed on), (1) if it left the queue, (0) otherwise.
CREATE PROCEDURE dlock_permit_dequeue_v1(IN p_name VARBINARY(1024), IN p_token VARCHAR(64))
BEGIN
    DECLARE t DATETIME(6);
    DECLARE r1, handed BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    CALL dlock_row_v1(p_name, 'semaphore');
    SET t = UTC_TIMESTAMP(6);
    IF EXISTS (SELECT 1 FROM dlock_holder WHERE name = p_name AND kind = 'semaphore'
        AND owner = p_token AND expires_at > t) THEN
        CALL dlock_give_back_v1(p_name, p_token, '', t, handed);
        SET r1 = 2;
    ELSE
        DELETE FROM dlock_waiter WHERE name = p_name AND kind = 'semaphore'
            AND owner = p_token;
        SET r1 = ROW_COUNT();
    END IF;
    COMMIT;
    CALL dlock_reply_v1(1, r1, NULL, NULL);
END
--;
DROP PROCEDURE IF EXISTS dlock_hand_rw_v1
--;
-- Hands the read-write lock to the first live waiters, as hand_off does: a waiting writer
-- once neither a writer nor a reader holds, or every waiting reader up to the first waiting
-- writer while no writer holds. How many were handed the lock.
CREATE PROCEDURE dlock_hand_rw_v1(IN p_name VARBINARY(1024), IN t DATETIME(6),
    OUT o_handed BIGINT)
BEGIN
    DECLARE held, soonest, longest, f BIGINT;
    DECLARE head VARCHAR(64);
    DECLARE deadline DATETIME(6);
    DECLARE w_mode VARCHAR(8);
    SET o_handed = 0;
    hand: BEGIN
        IF EXISTS (SELECT 1 FROM dlock_lock WHERE name = p_name AND kind = 'rwlock'
            AND owner IS NOT NULL AND expires_at > t) THEN
            LEAVE hand;
        END IF;
        CALL dlock_live_holders_v1(p_name, 'rwlock', t, held, soonest, longest);
        scan: LOOP
            CALL dlock_live_head_v1(p_name, 'rwlock', t, head, deadline, w_mode);
            IF head IS NULL OR (w_mode = 'write' AND held > 0) THEN
                LEAVE scan;
            END IF;
            DELETE FROM dlock_waiter WHERE name = p_name AND kind = 'rwlock' AND owner = head;
            SET o_handed = o_handed + 1;
            IF w_mode = 'write' THEN
                CALL dlock_grant_v1(p_name, 'rwlock', head, deadline, f);
                LEAVE scan;
            END IF;
            CALL dlock_grant_hold_v1(p_name, 'rwlock', head, deadline, f);
            SET held = held + 1;
        END LOOP;
    END;
END
--;
DROP PROCEDURE IF EXISTS dlock_rw_acquire_v1
--;
-- RW-ACQUIRE: as rw_acquire.lua, with `p_want` 'read' or 'write' and, for a read by the
-- owner of the write hold, that hold's owner token in `p_mine` (else ''). Selects as ACQUIRE.
CREATE PROCEDURE dlock_rw_acquire_v1(IN p_name VARBINARY(1024), IN p_token VARCHAR(64),
    IN p_lease BIGINT, IN p_count BIGINT, IN p_mode VARCHAR(16), IN p_wlease BIGINT,
    IN p_want VARCHAR(8), IN p_mine VARCHAR(64))
BEGIN
    DECLARE t, l_until DATETIME(6);
    DECLARE held, soonest, longest, handed BIGINT;
    DECLARE head, writing VARCHAR(64);
    DECLARE deadline, l_expires DATETIME(6);
    DECLARE w_mode VARCHAR(8);
    DECLARE l_fence BIGINT;
    DECLARE at_head, take BOOLEAN;
    DECLARE n INT DEFAULT 0;
    DECLARE r1, r2, r3 BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    CALL dlock_row_v1(p_name, 'rwlock');
    SET t = UTC_TIMESTAMP(6);
    SET l_until = t + INTERVAL p_lease * 1000 MICROSECOND;
    body: BEGIN
        -- Ours already: a reentrant acquire, a retry, or the claim of a hand-off.
        IF p_want = 'write' THEN
            CALL dlock_stretch_v1(p_name, 'rwlock', p_token, p_count, t, l_until, r2);
        ELSE
            CALL dlock_stretch_hold_v1(p_name, 'rwlock', p_token, p_count, t, l_until, r2);
        END IF;
        IF r2 IS NOT NULL THEN
            SET n = 3, r1 = 1, r3 = p_count;
            LEAVE body;
        END IF;
        IF p_mode = 'refresh' AND NOT EXISTS (SELECT 1 FROM dlock_waiter
            WHERE name = p_name AND kind = 'rwlock' AND owner = p_token) THEN
            SET n = 1, r1 = 3;
            LEAVE body;
        END IF;
        -- Holders that ran out make way for the first waiters (perhaps this one).
        CALL dlock_hand_rw_v1(p_name, t, handed);
        IF p_want = 'write' THEN
            CALL dlock_stretch_v1(p_name, 'rwlock', p_token, p_count, t, l_until, r2);
        ELSE
            CALL dlock_stretch_hold_v1(p_name, 'rwlock', p_token, p_count, t, l_until, r2);
        END IF;
        IF r2 IS NOT NULL THEN
            SET n = 3, r1 = 1, r3 = p_count;
            LEAVE body;
        END IF;
        CALL dlock_live_head_v1(p_name, 'rwlock', t, head, deadline, w_mode);
        SET at_head = head IS NULL OR head = p_token;
        SELECT IF(expires_at > t, owner, NULL), expires_at, fence
            INTO writing, l_expires, l_fence
            FROM dlock_lock WHERE name = p_name AND kind = 'rwlock';
        CALL dlock_live_holders_v1(p_name, 'rwlock', t, held, soonest, longest);
        IF p_want = 'write' THEN
            SET take = at_head AND writing IS NULL AND held = 0;
        ELSE
            SET take = (at_head AND writing IS NULL) OR (p_mine <> '' AND writing <=> p_mine);
        END IF;
        IF take THEN
            DELETE FROM dlock_waiter WHERE name = p_name AND kind = 'rwlock'
                AND owner = p_token;
            IF p_want = 'write' THEN
                CALL dlock_grant_v1(p_name, 'rwlock', p_token, l_until, r2);
            ELSE
                CALL dlock_grant_hold_v1(p_name, 'rwlock', p_token, l_until, r2);
            END IF;
            SET n = 3, r1 = 1, r3 = 1;
            LEAVE body;
        END IF;
        SET r2 = IF(writing IS NOT NULL,
            FLOOR(TIMESTAMPDIFF(MICROSECOND, t, l_expires) / 1000), longest);
        IF p_mode = 'try' THEN
            SET n = 2, r1 = 0;
            LEAVE body;
        END IF;
        CALL dlock_enqueue_v1(p_name, 'rwlock', p_token,
            t + INTERVAL p_wlease * 1000 MICROSECOND, p_want);
        SET n = 3, r1 = 2, r3 = l_fence;
    END;
    COMMIT;
    CALL dlock_reply_v1(n, r1, r2, r3);
END
--;
DROP PROCEDURE IF EXISTS dlock_rw_release_v1
--;
-- RW-RELEASE: as rw_release.lua; `p_token`'s hold is the writer's or a read hold. Selects
-- (0) not the owner | (1, count) still held | (2, handed) freed (handed: waiters the lock
-- went to).
CREATE PROCEDURE dlock_rw_release_v1(IN p_name VARBINARY(1024), IN p_token VARCHAR(64),
    IN p_count BIGINT)
BEGIN
    DECLARE t DATETIME(6);
    DECLARE writer, reader INT DEFAULT 0;
    DECLARE n INT DEFAULT 2;
    DECLARE r1, r2 BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    CALL dlock_row_v1(p_name, 'rwlock');
    SET t = UTC_TIMESTAMP(6);
    SELECT COUNT(*) INTO writer FROM dlock_lock WHERE name = p_name AND kind = 'rwlock'
        AND owner = p_token AND expires_at > t;
    SELECT COUNT(*) INTO reader FROM dlock_holder WHERE name = p_name AND kind = 'rwlock'
        AND owner = p_token AND expires_at > t;
    IF writer = 0 AND reader = 0 THEN
        SET n = 1, r1 = 0;
    ELSEIF p_count > 0 THEN
        UPDATE dlock_lock SET holds = p_count WHERE name = p_name AND kind = 'rwlock'
            AND owner = p_token;
        UPDATE dlock_holder SET holds = p_count WHERE name = p_name AND kind = 'rwlock'
            AND owner = p_token;
        SET r1 = 1, r2 = p_count;
    ELSE
        IF writer > 0 THEN
            CALL dlock_free_v1(p_name, 'rwlock');
        END IF;
        DELETE FROM dlock_holder WHERE name = p_name AND kind = 'rwlock' AND owner = p_token;
        CALL dlock_hand_rw_v1(p_name, t, r2);
        SET r1 = 2;
    END IF;
    COMMIT;
    CALL dlock_reply_v1(n, r1, r2, NULL);
END
--;
DROP PROCEDURE IF EXISTS dlock_rw_dequeue_v1
--;
-- RW-DEQUEUE: as rw_dequeue.lua. Selects (2) if the lock had been handed to the waiter (now
-- passed on), (1) if it left the queue, (0) otherwise.
CREATE PROCEDURE dlock_rw_dequeue_v1(IN p_name VARBINARY(1024), IN p_token VARCHAR(64))
BEGIN
    DECLARE t DATETIME(6);
    DECLARE writer, reader INT DEFAULT 0;
    DECLARE r1, handed BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    CALL dlock_row_v1(p_name, 'rwlock');
    SET t = UTC_TIMESTAMP(6);
    SELECT COUNT(*) INTO writer FROM dlock_lock WHERE name = p_name AND kind = 'rwlock'
        AND owner = p_token AND expires_at > t;
    SELECT COUNT(*) INTO reader FROM dlock_holder WHERE name = p_name AND kind = 'rwlock'
        AND owner = p_token AND expires_at > t;
    IF writer > 0 OR reader > 0 THEN
        IF writer > 0 THEN
            CALL dlock_free_v1(p_name, 'rwlock');
        END IF;
        DELETE FROM dlock_holder WHERE name = p_name AND kind = 'rwlock' AND owner = p_token;
        CALL dlock_hand_rw_v1(p_name, t, handed);
        SET r1 = 2;
    ELSE
        DELETE FROM dlock_waiter WHERE name = p_name AND kind = 'rwlock' AND owner = p_token;
        SET r1 = ROW_COUNT();
    END IF;
    COMMIT;
    CALL dlock_reply_v1(1, r1, NULL, NULL);
END
--;
DROP PROCEDURE IF EXISTS dlock_extend_v1
--;
-- EXTEND of one hold (a client renews each hold on its own here): as extend.lua, for any
-- hold (a lock's, a writer's, a permit, a reader's: owner tokens are never shared). Selects
-- (1) extended (a lease never shrinks) | (0) not the owner.
CREATE PROCEDURE dlock_extend_v1(IN p_name VARBINARY(1024), IN p_token VARCHAR(64),
    IN p_lease BIGINT)
BEGIN
    DECLARE t, l_until DATETIME(6);
    DECLARE rows_locked, r1 BIGINT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SELECT COUNT(*) INTO rows_locked FROM dlock_lock WHERE name = p_name FOR UPDATE;
    SET t = UTC_TIMESTAMP(6);
    SET l_until = t + INTERVAL p_lease * 1000 MICROSECOND;
    -- Counted before the update: an update that leaves a longer lease as it is changes no row.
    SELECT COUNT(*) INTO r1 FROM dlock_lock
        WHERE name = p_name AND owner = p_token AND expires_at > t;
    IF r1 > 0 THEN
        UPDATE dlock_lock SET expires_at = GREATEST(expires_at, l_until)
            WHERE name = p_name AND owner = p_token;
    ELSE
        SELECT COUNT(*) INTO r1 FROM dlock_holder
            WHERE name = p_name AND owner = p_token AND expires_at > t;
        UPDATE dlock_holder SET expires_at = GREATEST(expires_at, l_until)
            WHERE name = p_name AND owner = p_token AND expires_at > t;
    END IF;
    COMMIT;
    CALL dlock_reply_v1(1, r1, NULL, NULL);
END
--;
DROP PROCEDURE IF EXISTS dlock_status_v1
--;
-- STATUS of a lock, read only: as status.lua. Selects (owner token or '', hold count, tenure's
-- fencing token, pttl, latest fencing token, the live waiters' tokens in queue order
-- separated by spaces, or NULL).
CREATE PROCEDURE dlock_status_v1(IN p_name VARBINARY(1024))
BEGIN
    DECLARE t DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
    SET SESSION group_concat_max_len = 1048576;
    SELECT
        IF(l.held, l.owner, '') AS owner,
        IF(l.held, l.holds, 0) AS holds,
        IF(l.held, l.fence, 0) AS fence,
        IF(l.held, FLOOR(TIMESTAMPDIFF(MICROSECOND, t, l.expires_at) / 1000), -2) AS pttl,
        COALESCE(l.fence, 0) AS latest,
        (SELECT GROUP_CONCAT(w.owner ORDER BY w.ticket SEPARATOR ' ') FROM dlock_waiter w
            WHERE w.name = p_name AND w.kind = 'lock' AND w.expires_at > t) AS waiters
    FROM (SELECT 1) one
    LEFT JOIN (SELECT owner, holds, fence, expires_at,
            owner IS NOT NULL AND expires_at > t AS held
        FROM dlock_lock WHERE name = p_name AND kind = 'lock') l ON TRUE;
END
--;
-- Elections (§20): an election is the lock of its name; its leader publishes a value under its
-- term, the fencing token of its tenure. The value a tenure proclaimed, one row per name: it
-- outlives the tenure, and LEADER shows it only while that tenure holds the lock. Observers
-- look again (no NOTIFY).
CREATE TABLE IF NOT EXISTS dlock_leader (
    name  VARBINARY(1024) NOT NULL,
    fence BIGINT NOT NULL,
    value VARBINARY(4096) NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB
--;
DROP PROCEDURE IF EXISTS dlock_proclaim_v1
--;
-- PROCLAIM: as proclaim.lua. Selects (1, term) stored | (0) not this tenure's (another owner
-- or term, or its lease ran out).
CREATE PROCEDURE dlock_proclaim_v1(IN p_name VARBINARY(1024), IN p_token VARCHAR(64),
    IN p_term BIGINT, IN p_value VARBINARY(4096))
BEGIN
    DECLARE l_owner VARCHAR(64);
    DECLARE l_fence BIGINT;
    DECLARE l_expires DATETIME(6);
    DECLARE t DATETIME(6);
    DECLARE ours BOOLEAN DEFAULT FALSE;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    CALL dlock_row_v1(p_name, 'lock');
    SET t = UTC_TIMESTAMP(6);
    SELECT owner, fence, expires_at INTO l_owner, l_fence, l_expires FROM dlock_lock
        WHERE name = p_name AND kind = 'lock';
    SET ours = l_owner IS NOT NULL AND l_owner = p_token AND l_fence = p_term AND l_expires > t;
    IF ours THEN
        INSERT INTO dlock_leader (name, fence, value) VALUES (p_name, p_term, p_value)
            ON DUPLICATE KEY UPDATE fence = p_term, value = p_value;
    END IF;
    COMMIT;
    IF ours THEN
        CALL dlock_reply_v1(2, 1, p_term, NULL);
    ELSE
        CALL dlock_reply_v1(1, 0, NULL, NULL);
    END IF;
END
--;
DROP PROCEDURE IF EXISTS dlock_resign_v1
--;
-- RESIGN: as resign.lua, the final release of an election's leader (RELEASE with count 0),
-- which drops its value. Selects (0) not the owner | (2, handed) freed (handed: 1 if a
-- waiter got it).
CREATE PROCEDURE dlock_resign_v1(IN p_name VARBINARY(1024), IN p_token VARCHAR(64))
BEGIN
    DECLARE n INT;
    DECLARE r1, r2 BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    CALL dlock_release_held_v1(p_name, p_token, 0, '', n, r1, r2);
    IF r1 = 2 THEN
        DELETE FROM dlock_leader WHERE name = p_name;
    END IF;
    COMMIT;
    CALL dlock_reply_v1(n, r1, r2, NULL);
END
--;
DROP PROCEDURE IF EXISTS dlock_leader_v1
--;
-- LEADER, read only: as leader.lua. Selects (term, value, pttl): the holder's fencing token
-- (0 if the lock is free), the value proclaimed in its tenure (NULL if none) and the
-- milliseconds its lease has left (-2 if free). The last procedure the schema creates: a
-- client that finds it needs no DDL.
CREATE PROCEDURE dlock_leader_v1(IN p_name VARBINARY(1024))
BEGIN
    DECLARE t DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
    SELECT
        CAST(IF(l.held, l.fence, 0) AS SIGNED) AS term,
        IF(l.held, (SELECT v.value FROM dlock_leader v
            WHERE v.name = p_name AND v.fence = l.fence), NULL) AS value,
        CAST(IF(l.held, FLOOR(TIMESTAMPDIFF(MICROSECOND, t, l.expires_at) / 1000), -2)
            AS SIGNED) AS pttl
    FROM (SELECT 1) one
    LEFT JOIN (SELECT fence, expires_at, owner IS NOT NULL AND expires_at > t AS held
        FROM dlock_lock WHERE name = p_name AND kind = 'lock') l ON TRUE;
END

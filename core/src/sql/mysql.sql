-- dlock SQL protocol v1 for MariaDB 10.6+ and MySQL 8 (PROTOCOL.md §18). `dlock_` stands for
-- the table prefix. Statements are separated by lines of `--;`. Every procedure is the Lua
-- script of the same name (§6) run by the database, as on PostgreSQL: it takes the lock name
-- where the script takes its keys, the same arguments, and selects the script's reply as one
-- row. Each runs one short READ COMMITTED transaction that first locks the name's row, so one
-- name's operations run one at a time; the server's clock (UTC_TIMESTAMP(6), read after that
-- lock) writes and compares every expiry. There is no NOTIFY: waiters look (§18, wake-ups).

-- One row per lock name, kept after release: who holds it (owner token, NULL when free), its
-- hold count, the latest fencing token of the name and the holder's lease end (UTC).
CREATE TABLE IF NOT EXISTS dlock_lock (
    name       VARBINARY(1024) NOT NULL,
    owner      VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
    holds      INT NOT NULL DEFAULT 0,
    fence      BIGINT NOT NULL DEFAULT 0,
    expires_at DATETIME(6) NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB
--;
-- The waiters of each name in FIFO order (ticket), each until its waiter-lease deadline (UTC).
CREATE TABLE IF NOT EXISTS dlock_waiter (
    ticket     BIGINT NOT NULL AUTO_INCREMENT,
    name       VARBINARY(1024) NOT NULL,
    owner      VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    PRIMARY KEY (ticket),
    UNIQUE KEY waiter_owner (name, owner),
    KEY waiter_queue (name, ticket)
) ENGINE = InnoDB
--;
-- Fencing tokens: a counter row for every name, so a token never repeats when a lock's row is
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
-- Locks the name's row, creating it free if missing; its owner, fence and expiry.
CREATE PROCEDURE dlock_row_v1(IN p_name VARBINARY(1024), OUT o_owner VARCHAR(64),
    OUT o_fence BIGINT, OUT o_expires DATETIME(6))
BEGIN
    DECLARE found INT DEFAULT 0;
    SELECT 1, owner, fence, expires_at INTO found, o_owner, o_fence, o_expires
        FROM dlock_lock WHERE name = p_name FOR UPDATE;
    IF found = 0 THEN
        INSERT IGNORE INTO dlock_lock (name) VALUES (p_name);
        SELECT owner, fence, expires_at INTO o_owner, o_fence, o_expires
            FROM dlock_lock WHERE name = p_name FOR UPDATE;
    END IF;
END
--;
DROP PROCEDURE IF EXISTS dlock_live_head_v1
--;
-- The first live waiter of `p_name` and its deadline, dropping dead ones ahead of it.
CREATE PROCEDURE dlock_live_head_v1(IN p_name VARBINARY(1024), IN t DATETIME(6),
    OUT o_head VARCHAR(64), OUT o_deadline DATETIME(6))
BEGIN
    scan: LOOP
        SET o_head = NULL, o_deadline = NULL;
        SELECT owner, expires_at INTO o_head, o_deadline FROM dlock_waiter
            WHERE name = p_name ORDER BY ticket LIMIT 1;
        IF o_head IS NULL OR o_deadline > t THEN
            LEAVE scan;
        END IF;
        DELETE FROM dlock_waiter WHERE name = p_name AND owner = o_head;
    END LOOP;
END
--;
DROP PROCEDURE IF EXISTS dlock_grant_v1
--;
-- Makes `p_owner` the holder in a new tenure lasting until `p_until`; its fencing token.
CREATE PROCEDURE dlock_grant_v1(IN p_name VARBINARY(1024), IN p_owner VARCHAR(64),
    IN p_until DATETIME(6), OUT o_fence BIGINT)
BEGIN
    DECLARE counter BIGINT DEFAULT 0;
    DECLARE latest BIGINT DEFAULT 0;
    SELECT value INTO counter FROM dlock_fence WHERE id = 1 FOR UPDATE;
    SELECT fence INTO latest FROM dlock_lock WHERE name = p_name;
    SET o_fence = GREATEST(counter, latest) + 1;
    INSERT INTO dlock_fence (id, value) VALUES (1, o_fence)
        ON DUPLICATE KEY UPDATE value = o_fence;
    UPDATE dlock_lock SET owner = p_owner, holds = 1, fence = o_fence, expires_at = p_until
        WHERE name = p_name;
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
    DECLARE f BIGINT;
    CALL dlock_live_head_v1(p_name, t, head, deadline);
    IF head IS NULL THEN
        UPDATE dlock_lock SET owner = NULL, holds = 0, expires_at = NULL WHERE name = p_name;
        SET o_handed = 0;
    ELSE
        DELETE FROM dlock_waiter WHERE name = p_name AND owner = head;
        CALL dlock_grant_v1(p_name, head, deadline, f);
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
    DECLARE t DATETIME(6);
    DECLARE head VARCHAR(64);
    DECLARE deadline DATETIME(6);
    DECLARE queued INT DEFAULT 0;
    DECLARE n INT DEFAULT 0;
    DECLARE r1, r2, r3 BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    CALL dlock_row_v1(p_name, l_owner, l_fence, l_expires);
    SET t = UTC_TIMESTAMP(6);
    body: BEGIN
        IF l_owner = p_token AND l_expires > t THEN
            -- Ours already: a reentrant acquire, a retry, or the claim of a hand-off.
            UPDATE dlock_lock SET holds = p_count,
                expires_at = GREATEST(expires_at, t + INTERVAL p_lease * 1000 MICROSECOND)
                WHERE name = p_name;
            SET n = 3, r1 = 1, r2 = l_fence, r3 = p_count;
            LEAVE body;
        END IF;
        SELECT COUNT(*) INTO queued FROM dlock_waiter WHERE name = p_name AND owner = p_token;
        IF p_mode = 'refresh' AND queued = 0 THEN
            SET n = 1, r1 = 3;
            LEAVE body;
        END IF;
        IF l_owner IS NULL OR l_expires <= t THEN
            CALL dlock_live_head_v1(p_name, t, head, deadline);
            IF head IS NULL OR head = p_token OR p_flag = 'barge' THEN
                DELETE FROM dlock_waiter WHERE name = p_name AND owner = p_token;
                CALL dlock_grant_v1(p_name, p_token, t + INTERVAL p_lease * 1000 MICROSECOND,
                    r2);
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
        INSERT INTO dlock_waiter (name, owner, expires_at)
            VALUES (p_name, p_token, t + INTERVAL p_wlease * 1000 MICROSECOND)
            ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at);
        SET n = 3, r1 = 2, r3 = l_fence;
    END;
    COMMIT;
    IF n = 1 THEN
        SELECT r1;
    ELSEIF n = 2 THEN
        SELECT r1, r2;
    ELSE
        SELECT r1, r2, r3;
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
    DECLARE l_owner VARCHAR(64);
    DECLARE l_fence BIGINT;
    DECLARE l_expires DATETIME(6);
    DECLARE t DATETIME(6);
    DECLARE n INT DEFAULT 0;
    DECLARE r1, r2 BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    CALL dlock_row_v1(p_name, l_owner, l_fence, l_expires);
    SET t = UTC_TIMESTAMP(6);
    IF l_owner IS NULL OR l_owner <> p_token OR l_expires <= t THEN
        SET n = 1, r1 = 0;
    ELSEIF p_count > 0 THEN
        UPDATE dlock_lock SET holds = p_count WHERE name = p_name;
        SET n = 2, r1 = 1, r2 = p_count;
    ELSEIF p_flag = 'free' THEN
        UPDATE dlock_lock SET owner = NULL, holds = 0, expires_at = NULL WHERE name = p_name;
        SET n = 2, r1 = 2, r2 = 0;
    ELSE
        CALL dlock_hand_off_v1(p_name, t, r2);
        SET n = 2, r1 = 2;
    END IF;
    COMMIT;
    IF n = 1 THEN
        SELECT r1;
    ELSE
        SELECT r1, r2;
    END IF;
END
--;
DROP PROCEDURE IF EXISTS dlock_dequeue_v1
--;
-- DEQUEUE: as dequeue.lua. Selects (2) if the lock had been handed to the waiter (now passed
-- on), (1) if it left the queue, (0) otherwise.
CREATE PROCEDURE dlock_dequeue_v1(IN p_name VARBINARY(1024), IN p_token VARCHAR(64))
BEGIN
    DECLARE l_owner VARCHAR(64);
    DECLARE l_fence BIGINT;
    DECLARE l_expires DATETIME(6);
    DECLARE t DATETIME(6);
    DECLARE r1, handed BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    CALL dlock_row_v1(p_name, l_owner, l_fence, l_expires);
    SET t = UTC_TIMESTAMP(6);
    IF l_owner = p_token AND l_expires > t THEN
        CALL dlock_hand_off_v1(p_name, t, handed);
        SET r1 = 2;
    ELSE
        DELETE FROM dlock_waiter WHERE name = p_name AND owner = p_token;
        SET r1 = ROW_COUNT();
    END IF;
    COMMIT;
    SELECT r1;
END
--;
DROP PROCEDURE IF EXISTS dlock_extend_v1
--;
-- EXTEND of one hold (a client renews each hold on its own here): as extend.lua. Selects
-- (1) extended (a lease never shrinks) | (0) not the owner.
CREATE PROCEDURE dlock_extend_v1(IN p_name VARBINARY(1024), IN p_token VARCHAR(64),
    IN p_lease BIGINT)
BEGIN
    DECLARE t DATETIME(6);
    DECLARE r1 BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SELECT fence INTO r1 FROM dlock_lock WHERE name = p_name FOR UPDATE;
    SET t = UTC_TIMESTAMP(6);
    -- Counted before the update: an update that leaves a longer lease as it is changes no row.
    SELECT COUNT(*) INTO r1 FROM dlock_lock
        WHERE name = p_name AND owner = p_token AND expires_at > t;
    UPDATE dlock_lock
        SET expires_at = GREATEST(expires_at, t + INTERVAL p_lease * 1000 MICROSECOND)
        WHERE name = p_name AND owner = p_token AND expires_at > t;
    COMMIT;
    SELECT r1;
END
--;
DROP PROCEDURE IF EXISTS dlock_status_v1
--;
-- STATUS, read only: as status.lua. Selects (owner token or '', hold count, tenure's fencing
-- token, pttl, latest fencing token, the live waiters' tokens in queue order separated by
-- spaces, or NULL).
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
            WHERE w.name = p_name AND w.expires_at > t) AS waiters
    FROM (SELECT 1) one
    LEFT JOIN (SELECT owner, holds, fence, expires_at,
            owner IS NOT NULL AND expires_at > t AS held
        FROM dlock_lock WHERE name = p_name) l ON TRUE;
END

-- dlock SQL protocol v1 for PostgreSQL (PROTOCOL.md §18). `dlock_` stands for the table
-- prefix. Statements are separated by lines of `--;`. Every function is the Lua script of the
-- same name (§6, §16, §17) run by the database: it takes the lock name where the script takes
-- its keys, the same arguments, and replies the same integers. The name's row is locked first
-- (FOR UPDATE), so one name's operations run one at a time, as Redis runs scripts; the
-- server's clock (clock_timestamp(), read after that lock) writes and compares every expiry.

-- One row per name and kind, kept after release. `kind` is `lock`, `semaphore` or `rwlock`:
-- a lock and a semaphore of one name are apart, as on Redis. The row holds the latest fencing
-- token of the name and kind, and the tenure that holds it alone: a lock's holder, or a
-- read-write lock's writer (owner token, NULL when free; hold count; lease end). A
-- semaphore's row holds nobody: it keeps the semaphore's number of permits.
CREATE TABLE IF NOT EXISTS dlock_lock (
    name       text NOT NULL,
    kind       text NOT NULL,
    owner      text,
    holds      integer NOT NULL DEFAULT 0,
    fence      bigint NOT NULL DEFAULT 0,
    expires_at timestamptz,
    permits    integer,
    PRIMARY KEY (name, kind)
)
--;
-- The holders that share a name: a semaphore's permits and a read-write lock's readers, each
-- with its own owner token, hold count, fencing token and lease end.
CREATE TABLE IF NOT EXISTS dlock_holder (
    name       text NOT NULL,
    kind       text NOT NULL,
    owner      text NOT NULL,
    holds      integer NOT NULL,
    fence      bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (name, kind, owner)
)
--;
-- The waiters of each name and kind in FIFO order (ticket), each until its waiter-lease
-- deadline; a read-write lock's waiters say what they wait for (`read` or `write`).
CREATE TABLE IF NOT EXISTS dlock_waiter (
    name       text NOT NULL,
    kind       text NOT NULL,
    owner      text NOT NULL,
    ticket     bigint GENERATED ALWAYS AS IDENTITY,
    expires_at timestamptz NOT NULL,
    mode       text,
    PRIMARY KEY (name, kind, owner)
)
--;
CREATE INDEX IF NOT EXISTS dlock_waiter_queue ON dlock_waiter (name, kind, ticket)
--;
-- Fencing tokens: one sequence for every name, so a token never repeats even when a row is
-- deleted, and never goes back after a crash (a committed token's sequence advance is in the
-- WAL before the commit).
CREATE SEQUENCE IF NOT EXISTS dlock_fence
--;
-- The row of a name and kind, locked; created free if missing.
CREATE OR REPLACE FUNCTION dlock_row_v1(p_name text, p_kind text) RETURNS dlock_lock
LANGUAGE plpgsql AS $$
DECLARE
    l dlock_lock;
BEGIN
    SELECT * INTO l FROM dlock_lock WHERE name = p_name AND kind = p_kind FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO dlock_lock (name, kind) VALUES (p_name, p_kind)
            ON CONFLICT (name, kind) DO NOTHING;
        SELECT * INTO l FROM dlock_lock WHERE name = p_name AND kind = p_kind FOR UPDATE;
    END IF;
    RETURN l;
END $$
--;
-- Milliseconds a lease ending at `e` has left at `t`; -2 when it has ended (PTTL's word).
CREATE OR REPLACE FUNCTION dlock_ms_left_v1(e timestamptz, t timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN e IS NULL OR e <= t THEN -2
                ELSE floor(extract(epoch FROM e - t) * 1000)::bigint END
$$
--;
-- The first live waiter of a name and kind, its deadline and mode, dropping dead ones ahead.
CREATE OR REPLACE FUNCTION dlock_live_head_v1(p_name text, p_kind text, t timestamptz,
    OUT head text, OUT deadline timestamptz, OUT mode text)
LANGUAGE plpgsql AS $$
BEGIN
    LOOP
        SELECT w.owner, w.expires_at, w.mode INTO head, deadline, mode FROM dlock_waiter w
            WHERE w.name = p_name AND w.kind = p_kind ORDER BY w.ticket LIMIT 1;
        IF head IS NULL OR deadline > t THEN
            RETURN;
        END IF;
        DELETE FROM dlock_waiter WHERE name = p_name AND kind = p_kind AND owner = head;
    END LOOP;
END $$
--;
-- Queues `p_owner` (or renews its place) until `p_until`.
CREATE OR REPLACE FUNCTION dlock_enqueue_v1(p_name text, p_kind text, p_owner text,
    p_until timestamptz, p_mode text) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO dlock_waiter (name, kind, owner, expires_at, mode)
        VALUES (p_name, p_kind, p_owner, p_until, p_mode)
        ON CONFLICT (name, kind, owner)
        DO UPDATE SET expires_at = EXCLUDED.expires_at, mode = EXCLUDED.mode
$$
--;
-- Makes `p_owner` the row's holder in a new tenure lasting until `p_until`; its token.
CREATE OR REPLACE FUNCTION dlock_grant_v1(p_name text, p_kind text, p_owner text,
    p_until timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    f bigint;
BEGIN
    UPDATE dlock_lock SET fence = greatest(nextval('dlock_fence'), fence + 1),
        owner = p_owner, holds = 1, expires_at = p_until
        WHERE name = p_name AND kind = p_kind RETURNING fence INTO f;
    RETURN f;
END $$
--;
-- Makes `p_owner` one of the holders (a permit, a reader) in a new tenure lasting until
-- `p_until`; its token, the row's latest.
CREATE OR REPLACE FUNCTION dlock_grant_hold_v1(p_name text, p_kind text, p_owner text,
    p_until timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    f bigint;
BEGIN
    UPDATE dlock_lock SET fence = greatest(nextval('dlock_fence'), fence + 1)
        WHERE name = p_name AND kind = p_kind RETURNING fence INTO f;
    INSERT INTO dlock_holder (name, kind, owner, holds, fence, expires_at)
        VALUES (p_name, p_kind, p_owner, 1, f, p_until)
        ON CONFLICT (name, kind, owner)
        DO UPDATE SET holds = 1, fence = EXCLUDED.fence, expires_at = EXCLUDED.expires_at;
    RETURN f;
END $$
--;
-- The row's tenure if `p_owner` holds it: now at `p_count` holds and lasting until `p_until`
-- at least (a lease never shrinks); its token, or NULL.
CREATE OR REPLACE FUNCTION dlock_stretch_v1(p_name text, p_kind text, p_owner text,
    p_count bigint, t timestamptz, p_until timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    f bigint;
BEGIN
    UPDATE dlock_lock SET holds = p_count, expires_at = greatest(expires_at, p_until)
        WHERE name = p_name AND kind = p_kind AND owner = p_owner AND expires_at > t
        RETURNING fence INTO f;
    RETURN f;
END $$
--;
-- The same for one of the holders.
CREATE OR REPLACE FUNCTION dlock_stretch_hold_v1(p_name text, p_kind text, p_owner text,
    p_count bigint, t timestamptz, p_until timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    f bigint;
BEGIN
    UPDATE dlock_holder SET holds = p_count, expires_at = greatest(expires_at, p_until)
        WHERE name = p_name AND kind = p_kind AND owner = p_owner AND expires_at > t
        RETURNING fence INTO f;
    RETURN f;
END $$
--;
-- The holders whose lease lives, after dropping the others: how many, and the least and the
-- most milliseconds one has left (-2: none).
CREATE OR REPLACE FUNCTION dlock_live_holders_v1(p_name text, p_kind text, t timestamptz,
    OUT held bigint, OUT soonest bigint, OUT last bigint)
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM dlock_holder WHERE name = p_name AND kind = p_kind AND expires_at <= t;
    SELECT count(*), coalesce(min(dlock_ms_left_v1(expires_at, t)), -2),
           coalesce(max(dlock_ms_left_v1(expires_at, t)), -2)
        INTO held, soonest, last
        FROM dlock_holder WHERE name = p_name AND kind = p_kind;
END $$
--;
-- Wakes waiter `head` on its engine's channel: `<token> <fencing token>` or `<token> free`.
CREATE OR REPLACE FUNCTION dlock_wake_v1(head text, word text) RETURNS void
LANGUAGE sql AS $$
    SELECT pg_notify('dlock:wake:' || left(head, 32), head || ' ' || word)
$$
--;
-- Ends the row's tenure.
CREATE OR REPLACE FUNCTION dlock_free_v1(p_name text, p_kind text) RETURNS void
LANGUAGE sql AS $$
    UPDATE dlock_lock SET owner = NULL, holds = 0, expires_at = NULL
        WHERE name = p_name AND kind = p_kind
$$
--;
-- Hands a free lock to the first live waiter for the rest of its waiter lease; 1 if one got it.
CREATE OR REPLACE FUNCTION dlock_hand_off_v1(p_name text, t timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    h record;
BEGIN
    h := dlock_live_head_v1(p_name, 'lock', t);
    IF h.head IS NULL THEN
        PERFORM dlock_free_v1(p_name, 'lock');
        RETURN 0;
    END IF;
    DELETE FROM dlock_waiter WHERE name = p_name AND kind = 'lock' AND owner = h.head;
    PERFORM dlock_wake_v1(h.head, dlock_grant_v1(p_name, 'lock', h.head, h.deadline)::text);
    RETURN 1;
END $$
--;
-- ACQUIRE: as acquire.lua. Replies {1, fencing token, count} acquired | {0, pttl} busy |
-- {3} not queued | {2, pttl, latest fencing token} queued.
CREATE OR REPLACE FUNCTION dlock_acquire_v1(p_name text, p_token text, p_lease bigint,
    p_count bigint, p_mode text, p_wlease bigint, p_flag text)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    l dlock_lock := dlock_row_v1(p_name, 'lock');
    t timestamptz := clock_timestamp();
    until timestamptz := t + p_lease * interval '1 millisecond';
    f bigint;
    h record;
BEGIN
    -- Ours already: a reentrant acquire, a retry, or the claim of a hand-off.
    f := dlock_stretch_v1(p_name, 'lock', p_token, p_count, t, until);
    IF f IS NOT NULL THEN
        RETURN ARRAY[1, f, p_count];
    END IF;
    IF p_mode = 'refresh' AND NOT EXISTS (SELECT 1 FROM dlock_waiter
        WHERE name = p_name AND kind = 'lock' AND owner = p_token) THEN
        RETURN ARRAY[3]::bigint[];
    END IF;
    IF l.owner IS NULL OR l.expires_at <= t THEN
        h := dlock_live_head_v1(p_name, 'lock', t);
        IF h.head IS NULL OR h.head = p_token OR p_flag = 'barge' THEN
            DELETE FROM dlock_waiter WHERE name = p_name AND kind = 'lock' AND owner = p_token;
            RETURN ARRAY[1, dlock_grant_v1(p_name, 'lock', p_token, until), 1];
        END IF;
    END IF;
    IF p_mode = 'try' THEN
        RETURN ARRAY[0, dlock_ms_left_v1(l.expires_at, t)];
    END IF;
    PERFORM dlock_enqueue_v1(p_name, 'lock', p_token,
        t + p_wlease * interval '1 millisecond', NULL);
    RETURN ARRAY[2, dlock_ms_left_v1(l.expires_at, t), l.fence];
END $$
--;
-- RELEASE: as release.lua. Replies {0} not the owner | {1, count} still held |
-- {2, handed} freed (handed: 1 if a waiter got it).
CREATE OR REPLACE FUNCTION dlock_release_v1(p_name text, p_token text, p_count bigint,
    p_flag text)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    l dlock_lock := dlock_row_v1(p_name, 'lock');
    t timestamptz := clock_timestamp();
    h record;
BEGIN
    IF l.owner IS DISTINCT FROM p_token OR l.expires_at <= t THEN
        RETURN ARRAY[0]::bigint[];
    END IF;
    IF p_count > 0 THEN
        UPDATE dlock_lock SET holds = p_count WHERE name = p_name AND kind = 'lock';
        RETURN ARRAY[1, p_count]::bigint[];
    END IF;
    IF p_flag = 'free' THEN
        PERFORM dlock_free_v1(p_name, 'lock');
        h := dlock_live_head_v1(p_name, 'lock', t);
        IF h.head IS NOT NULL THEN
            PERFORM dlock_wake_v1(h.head, 'free');
        END IF;
        RETURN ARRAY[2, 0]::bigint[];
    END IF;
    RETURN ARRAY[2, dlock_hand_off_v1(p_name, t)];
END $$
--;
-- DEQUEUE: as dequeue.lua. Replies {2} if the lock had been handed to the waiter (now passed
-- on), {1} if it left the queue, {0} otherwise.
CREATE OR REPLACE FUNCTION dlock_dequeue_v1(p_name text, p_token text)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    l dlock_lock := dlock_row_v1(p_name, 'lock');
    t timestamptz := clock_timestamp();
BEGIN
    IF l.owner = p_token AND l.expires_at > t THEN
        PERFORM dlock_hand_off_v1(p_name, t);
        RETURN ARRAY[2]::bigint[];
    END IF;
    DELETE FROM dlock_waiter WHERE name = p_name AND kind = 'lock' AND owner = p_token;
    RETURN ARRAY[CASE WHEN FOUND THEN 1 ELSE 0 END]::bigint[];
END $$
--;
-- Hands up to `p_free` permits to the first live waiters, one each, as hand_off does a lock;
-- how many were handed.
CREATE OR REPLACE FUNCTION dlock_hand_permits_v1(p_name text, p_free bigint, t timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    h record;
    handed bigint := 0;
BEGIN
    WHILE handed < p_free LOOP
        h := dlock_live_head_v1(p_name, 'semaphore', t);
        EXIT WHEN h.head IS NULL;
        DELETE FROM dlock_waiter WHERE name = p_name AND kind = 'semaphore' AND owner = h.head;
        PERFORM dlock_wake_v1(h.head,
            dlock_grant_hold_v1(p_name, 'semaphore', h.head, h.deadline)::text);
        handed := handed + 1;
    END LOOP;
    RETURN handed;
END $$
--;
-- Gives back the permit of `p_token`. A fair release hands the permits now free to the first
-- waiters ('free' only wakes the first waiter); how many were handed.
CREATE OR REPLACE FUNCTION dlock_give_back_v1(p_name text, p_token text, p_flag text,
    t timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    h record;
BEGIN
    DELETE FROM dlock_holder WHERE name = p_name AND kind = 'semaphore' AND owner = p_token;
    IF p_flag = 'free' THEN
        h := dlock_live_head_v1(p_name, 'semaphore', t);
        IF h.head IS NOT NULL THEN
            PERFORM dlock_wake_v1(h.head, 'free');
        END IF;
        RETURN 0;
    END IF;
    h := dlock_live_holders_v1(p_name, 'semaphore', t);
    RETURN dlock_hand_permits_v1(p_name, coalesce((SELECT permits FROM dlock_lock
        WHERE name = p_name AND kind = 'semaphore'), 0) - h.held, t);
END $$
--;
-- PERMIT-ACQUIRE: as permit_acquire.lua. Replies as ACQUIRE, or {4, permits} when the
-- semaphore is in use with another number of permits.
CREATE OR REPLACE FUNCTION dlock_permit_acquire_v1(p_name text, p_token text, p_lease bigint,
    p_permits bigint, p_mode text, p_wlease bigint, p_flag text)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    l dlock_lock := dlock_row_v1(p_name, 'semaphore');
    t timestamptz := clock_timestamp();
    until timestamptz := t + p_lease * interval '1 millisecond';
    f bigint;
    h record;
    w record;
    free bigint;
BEGIN
    -- Ours already: a retry, or the claim of a hand-off.
    f := dlock_stretch_hold_v1(p_name, 'semaphore', p_token, 1, t, until);
    IF f IS NOT NULL THEN
        RETURN ARRAY[1, f, 1];
    END IF;
    IF p_mode = 'refresh' AND NOT EXISTS (SELECT 1 FROM dlock_waiter
        WHERE name = p_name AND kind = 'semaphore' AND owner = p_token) THEN
        RETURN ARRAY[3]::bigint[];
    END IF;
    h := dlock_live_holders_v1(p_name, 'semaphore', t);
    IF l.permits IS DISTINCT FROM p_permits THEN
        -- The number of permits is the semaphore's while anyone holds or waits.
        w := dlock_live_head_v1(p_name, 'semaphore', t);
        IF h.held > 0 OR w.head IS NOT NULL THEN
            RETURN ARRAY[4, coalesce(l.permits, 0)];
        END IF;
        UPDATE dlock_lock SET permits = p_permits WHERE name = p_name AND kind = 'semaphore';
    END IF;
    free := p_permits - h.held;
    IF free > 0 AND p_flag = 'barge' THEN
        DELETE FROM dlock_waiter WHERE name = p_name AND kind = 'semaphore' AND owner = p_token;
        RETURN ARRAY[1, dlock_grant_hold_v1(p_name, 'semaphore', p_token, until), 1];
    END IF;
    -- Permits that ran out go to the first waiters (perhaps this one), then to newcomers.
    free := free - dlock_hand_permits_v1(p_name, free, t);
    f := dlock_stretch_hold_v1(p_name, 'semaphore', p_token, 1, t, until);
    IF f IS NOT NULL THEN
        RETURN ARRAY[1, f, 1];
    END IF;
    IF free > 0 THEN
        RETURN ARRAY[1, dlock_grant_hold_v1(p_name, 'semaphore', p_token, until), 1];
    END IF;
    h := dlock_live_holders_v1(p_name, 'semaphore', t);
    IF p_mode = 'try' THEN
        RETURN ARRAY[0, h.soonest];
    END IF;
    PERFORM dlock_enqueue_v1(p_name, 'semaphore', p_token,
        t + p_wlease * interval '1 millisecond', NULL);
    RETURN ARRAY[2, h.soonest,
        (SELECT fence FROM dlock_lock WHERE name = p_name AND kind = 'semaphore')];
END $$
--;
-- PERMIT-RELEASE: as permit_release.lua. Replies {0} not the owner | {2, handed} freed
-- (handed: permits passed on to waiters).
CREATE OR REPLACE FUNCTION dlock_permit_release_v1(p_name text, p_token text, p_flag text)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    l dlock_lock := dlock_row_v1(p_name, 'semaphore');
    t timestamptz := clock_timestamp();
BEGIN
    IF NOT EXISTS (SELECT 1 FROM dlock_holder WHERE name = p_name AND kind = 'semaphore'
        AND owner = p_token AND expires_at > t) THEN
        RETURN ARRAY[0]::bigint[];
    END IF;
    RETURN ARRAY[2, dlock_give_back_v1(p_name, p_token, p_flag, t)];
END $$
--;
-- PERMIT-DEQUEUE: as permit_dequeue.lua. Replies {2} if a permit had been handed to the
-- waiter (now passed on), {1} if it left the queue, {0} otherwise.
CREATE OR REPLACE FUNCTION dlock_permit_dequeue_v1(p_name text, p_token text)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    l dlock_lock := dlock_row_v1(p_name, 'semaphore');
    t timestamptz := clock_timestamp();
BEGIN
    IF EXISTS (SELECT 1 FROM dlock_holder WHERE name = p_name AND kind = 'semaphore'
        AND owner = p_token AND expires_at > t) THEN
        PERFORM dlock_give_back_v1(p_name, p_token, '', t);
        RETURN ARRAY[2]::bigint[];
    END IF;
    DELETE FROM dlock_waiter WHERE name = p_name AND kind = 'semaphore' AND owner = p_token;
    RETURN ARRAY[CASE WHEN FOUND THEN 1 ELSE 0 END]::bigint[];
END $$
--;
-- Hands the read-write lock to the first live waiters, as hand_off does: a waiting writer
-- once neither a writer nor a reader holds, or every waiting reader up to the first waiting
-- writer while no writer holds. How many were handed the lock.
CREATE OR REPLACE FUNCTION dlock_hand_rw_v1(p_name text, t timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    h record;
    held bigint;
    handed bigint := 0;
BEGIN
    IF EXISTS (SELECT 1 FROM dlock_lock WHERE name = p_name AND kind = 'rwlock'
        AND owner IS NOT NULL AND expires_at > t) THEN
        RETURN 0;
    END IF;
    held := (dlock_live_holders_v1(p_name, 'rwlock', t)).held;
    LOOP
        h := dlock_live_head_v1(p_name, 'rwlock', t);
        EXIT WHEN h.head IS NULL OR (h.mode = 'write' AND held > 0);
        DELETE FROM dlock_waiter WHERE name = p_name AND kind = 'rwlock' AND owner = h.head;
        handed := handed + 1;
        IF h.mode = 'write' THEN
            PERFORM dlock_wake_v1(h.head,
                dlock_grant_v1(p_name, 'rwlock', h.head, h.deadline)::text);
            EXIT;
        END IF;
        PERFORM dlock_wake_v1(h.head,
            dlock_grant_hold_v1(p_name, 'rwlock', h.head, h.deadline)::text);
        held := held + 1;
    END LOOP;
    RETURN handed;
END $$
--;
-- The read-write hold of `p_token` (the writer's if `p_want` is `write`, else its read hold),
-- stretched as dlock_stretch_v1 does; its token, or NULL.
CREATE OR REPLACE FUNCTION dlock_rw_ours_v1(p_name text, p_token text, p_want text,
    p_count bigint, t timestamptz, p_until timestamptz)
RETURNS bigint LANGUAGE sql AS $$
    SELECT CASE WHEN p_want = 'write'
        THEN dlock_stretch_v1(p_name, 'rwlock', p_token, p_count, t, p_until)
        ELSE dlock_stretch_hold_v1(p_name, 'rwlock', p_token, p_count, t, p_until) END
$$
--;
-- RW-ACQUIRE: as rw_acquire.lua, with `p_want` 'read' or 'write' and, for a read by the
-- owner of the write hold, that hold's owner token in `p_mine` (else ''). Replies as ACQUIRE.
CREATE OR REPLACE FUNCTION dlock_rw_acquire_v1(p_name text, p_token text, p_lease bigint,
    p_count bigint, p_mode text, p_wlease bigint, p_want text, p_mine text)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    l dlock_lock := dlock_row_v1(p_name, 'rwlock');
    t timestamptz := clock_timestamp();
    until timestamptz := t + p_lease * interval '1 millisecond';
    f bigint;
    h record;
    readers record;
    first boolean;
    writing text;
    take boolean;
    pttl bigint;
BEGIN
    -- Ours already: a reentrant acquire, a retry, or the claim of a hand-off.
    f := dlock_rw_ours_v1(p_name, p_token, p_want, p_count, t, until);
    IF f IS NOT NULL THEN
        RETURN ARRAY[1, f, p_count];
    END IF;
    IF p_mode = 'refresh' AND NOT EXISTS (SELECT 1 FROM dlock_waiter
        WHERE name = p_name AND kind = 'rwlock' AND owner = p_token) THEN
        RETURN ARRAY[3]::bigint[];
    END IF;
    -- Holders that ran out make way for the first waiters (perhaps this one).
    PERFORM dlock_hand_rw_v1(p_name, t);
    f := dlock_rw_ours_v1(p_name, p_token, p_want, p_count, t, until);
    IF f IS NOT NULL THEN
        RETURN ARRAY[1, f, p_count];
    END IF;
    h := dlock_live_head_v1(p_name, 'rwlock', t);
    first := h.head IS NULL OR h.head = p_token;
    SELECT * INTO l FROM dlock_lock WHERE name = p_name AND kind = 'rwlock';
    writing := CASE WHEN l.expires_at > t THEN l.owner END;
    readers := dlock_live_holders_v1(p_name, 'rwlock', t);
    IF p_want = 'write' THEN
        take := first AND writing IS NULL AND readers.held = 0;
    ELSE
        take := (first AND writing IS NULL) OR (p_mine <> '' AND writing IS NOT DISTINCT FROM p_mine);
    END IF;
    IF take THEN
        DELETE FROM dlock_waiter WHERE name = p_name AND kind = 'rwlock' AND owner = p_token;
        IF p_want = 'write' THEN
            RETURN ARRAY[1, dlock_grant_v1(p_name, 'rwlock', p_token, until), 1];
        END IF;
        RETURN ARRAY[1, dlock_grant_hold_v1(p_name, 'rwlock', p_token, until), 1];
    END IF;
    IF writing IS NOT NULL THEN
        pttl := dlock_ms_left_v1(l.expires_at, t);
    ELSE
        pttl := readers.last;
    END IF;
    IF p_mode = 'try' THEN
        RETURN ARRAY[0, pttl];
    END IF;
    PERFORM dlock_enqueue_v1(p_name, 'rwlock', p_token,
        t + p_wlease * interval '1 millisecond', p_want);
    RETURN ARRAY[2, pttl, l.fence];
END $$
--;
-- RW-RELEASE: as rw_release.lua; `p_token`'s hold is the writer's or a read hold. Replies
-- {0} not the owner | {1, count} still held | {2, handed} freed (handed: waiters the lock
-- went to).
CREATE OR REPLACE FUNCTION dlock_rw_release_v1(p_name text, p_token text, p_count bigint)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    l dlock_lock := dlock_row_v1(p_name, 'rwlock');
    t timestamptz := clock_timestamp();
BEGIN
    IF l.owner = p_token AND l.expires_at > t THEN
        IF p_count > 0 THEN
            UPDATE dlock_lock SET holds = p_count WHERE name = p_name AND kind = 'rwlock';
            RETURN ARRAY[1, p_count];
        END IF;
        PERFORM dlock_free_v1(p_name, 'rwlock');
    ELSIF p_count > 0 THEN
        UPDATE dlock_holder SET holds = p_count WHERE name = p_name AND kind = 'rwlock'
            AND owner = p_token AND expires_at > t;
        RETURN CASE WHEN FOUND THEN ARRAY[1, p_count] ELSE ARRAY[0]::bigint[] END;
    ELSE
        DELETE FROM dlock_holder WHERE name = p_name AND kind = 'rwlock'
            AND owner = p_token AND expires_at > t;
        IF NOT FOUND THEN
            RETURN ARRAY[0]::bigint[];
        END IF;
    END IF;
    RETURN ARRAY[2, dlock_hand_rw_v1(p_name, t)];
END $$
--;
-- RW-DEQUEUE: as rw_dequeue.lua. Replies {2} if the lock had been handed to the waiter (now
-- passed on), {1} if it left the queue, {0} otherwise.
CREATE OR REPLACE FUNCTION dlock_rw_dequeue_v1(p_name text, p_token text)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    l dlock_lock := dlock_row_v1(p_name, 'rwlock');
    t timestamptz := clock_timestamp();
BEGIN
    IF l.owner = p_token AND l.expires_at > t THEN
        PERFORM dlock_free_v1(p_name, 'rwlock');
    ELSE
        DELETE FROM dlock_holder WHERE name = p_name AND kind = 'rwlock'
            AND owner = p_token AND expires_at > t;
        IF NOT FOUND THEN
            DELETE FROM dlock_waiter WHERE name = p_name AND kind = 'rwlock'
                AND owner = p_token;
            RETURN ARRAY[CASE WHEN FOUND THEN 1 ELSE 0 END]::bigint[];
        END IF;
    END IF;
    PERFORM dlock_hand_rw_v1(p_name, t);
    RETURN ARRAY[2]::bigint[];
END $$
--;
-- EXTEND, batched: as extend.lua, for any hold (a lock's, a writer's, a permit, a reader's:
-- owner tokens are never shared). Replies one flag per hold: 1 extended (a lease never
-- shrinks), 0 not the owner. Rows are locked in name order, so batches never deadlock.
CREATE OR REPLACE FUNCTION dlock_extend_v1(p_names text[], p_tokens text[], p_leases bigint[])
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    t timestamptz;
    until timestamptz;
    r bigint[] := array_fill(0::bigint, ARRAY[cardinality(p_names)]);
BEGIN
    PERFORM 1 FROM dlock_lock WHERE name = ANY (p_names) ORDER BY name, kind FOR UPDATE;
    t := clock_timestamp();
    FOR i IN 1 .. cardinality(p_names) LOOP
        until := t + p_leases[i] * interval '1 millisecond';
        UPDATE dlock_lock SET expires_at = greatest(expires_at, until)
            WHERE name = p_names[i] AND owner = p_tokens[i] AND expires_at > t;
        IF NOT FOUND THEN
            UPDATE dlock_holder SET expires_at = greatest(expires_at, until)
                WHERE name = p_names[i] AND owner = p_tokens[i] AND expires_at > t;
        END IF;
        IF FOUND THEN
            r[i] := 1;
        END IF;
    END LOOP;
    RETURN r;
END $$
--;
-- STATUS of a lock, read only: as status.lua. Replies {owner token or '', hold count,
-- tenure's fencing token, pttl, latest fencing token, then the live waiters' tokens in queue
-- order}, as text.
CREATE OR REPLACE FUNCTION dlock_status_v1(p_name text)
RETURNS text[] LANGUAGE plpgsql STABLE AS $$
DECLARE
    l dlock_lock;
    t timestamptz := clock_timestamp();
    held boolean;
BEGIN
    SELECT * INTO l FROM dlock_lock WHERE name = p_name AND kind = 'lock';
    held := l.owner IS NOT NULL AND l.expires_at > t;
    RETURN ARRAY[
        CASE WHEN held THEN l.owner ELSE '' END,
        CASE WHEN held THEN l.holds ELSE 0 END::text,
        CASE WHEN held THEN l.fence ELSE 0 END::text,
        CASE WHEN held THEN dlock_ms_left_v1(l.expires_at, t) ELSE -2 END::text,
        coalesce(l.fence, 0)::text
    ] || ARRAY(SELECT w.owner FROM dlock_waiter w
               WHERE w.name = p_name AND w.kind = 'lock' AND w.expires_at > t
               ORDER BY w.ticket);
END $$
--;
-- Elections (§20): an election is the lock of its name; its leader publishes a value under its
-- term, the fencing token of its tenure. The value a tenure proclaimed, one row per name: it
-- outlives the tenure, and LEADER shows it only while that tenure holds the lock.
CREATE TABLE IF NOT EXISTS dlock_leader (
    name  text PRIMARY KEY,
    fence bigint NOT NULL,
    value text NOT NULL
)
--;
-- Tells the observers of election `p_name` to read LEADER: one channel for every election of
-- the prefix (a channel name has at most 63 bytes), with the election's name as the payload.
CREATE OR REPLACE FUNCTION dlock_tell_v1(p_name text) RETURNS void
LANGUAGE sql AS $$
    SELECT pg_notify('dlock_leader', p_name)
$$
--;
-- PROCLAIM: as proclaim.lua. Replies {1, term} stored and observers told | {0} not this
-- tenure's (another owner or term, or its lease ran out).
CREATE OR REPLACE FUNCTION dlock_proclaim_v1(p_name text, p_token text, p_term bigint,
    p_value text)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    l dlock_lock := dlock_row_v1(p_name, 'lock');
    t timestamptz := clock_timestamp();
BEGIN
    IF l.owner IS DISTINCT FROM p_token OR l.fence <> p_term OR l.expires_at <= t THEN
        RETURN ARRAY[0]::bigint[];
    END IF;
    INSERT INTO dlock_leader (name, fence, value) VALUES (p_name, p_term, p_value)
        ON CONFLICT (name) DO UPDATE SET fence = EXCLUDED.fence, value = EXCLUDED.value;
    PERFORM dlock_tell_v1(p_name);
    RETURN ARRAY[1, p_term];
END $$
--;
-- RESIGN: as resign.lua, the final release of an election's leader (RELEASE with count 0),
-- which drops its value and tells its observers. Replies {0} not the owner | {2, handed}
-- freed (handed: 1 if a waiter got it).
CREATE OR REPLACE FUNCTION dlock_resign_v1(p_name text, p_token text)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    r bigint[] := dlock_release_v1(p_name, p_token, 0, '');
BEGIN
    IF r[1] = 2 THEN
        DELETE FROM dlock_leader WHERE name = p_name;
        PERFORM dlock_tell_v1(p_name);
    END IF;
    RETURN r;
END $$
--;
-- LEADER, read only: as leader.lua. Replies {term, value, pttl} as text: the holder's fencing
-- token ('0' if the lock is free), the value proclaimed in its tenure (NULL if none) and the
-- milliseconds its lease has left ('-2' if free). The last function the schema creates: a
-- client that finds it needs no DDL.
CREATE OR REPLACE FUNCTION dlock_leader_v1(p_name text)
RETURNS text[] LANGUAGE plpgsql STABLE AS $$
DECLARE
    l dlock_lock;
    t timestamptz := clock_timestamp();
BEGIN
    SELECT * INTO l FROM dlock_lock WHERE name = p_name AND kind = 'lock';
    IF l.owner IS NULL OR l.expires_at <= t THEN
        RETURN ARRAY['0', NULL, '-2'];
    END IF;
    RETURN ARRAY[l.fence::text,
        (SELECT v.value FROM dlock_leader v WHERE v.name = p_name AND v.fence = l.fence),
        dlock_ms_left_v1(l.expires_at, t)::text];
END $$

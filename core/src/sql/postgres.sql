-- dlock SQL protocol v1 for PostgreSQL (PROTOCOL.md §18). `dlock_` stands for the table
-- prefix. Statements are separated by lines of `--;`. Every function is the Lua script of the
-- same name (§5) run by the database: it takes the lock name where the script takes its keys,
-- the same arguments, and replies the same integers. The lock's row is locked first (FOR
-- UPDATE), so one name's operations run one at a time, as Redis runs scripts; the server's
-- clock (clock_timestamp(), read after that lock) writes and compares every expiry.

-- One row per lock name, kept after release: who holds it (owner token, NULL when free), its
-- hold count, the latest fencing token of the name and the holder's lease end.
CREATE TABLE IF NOT EXISTS dlock_lock (
    name       text PRIMARY KEY,
    owner      text,
    holds      integer NOT NULL DEFAULT 0,
    fence      bigint NOT NULL DEFAULT 0,
    expires_at timestamptz
)
--;
-- The waiters of each name in FIFO order (ticket), each until its waiter-lease deadline.
CREATE TABLE IF NOT EXISTS dlock_waiter (
    name       text NOT NULL,
    owner      text NOT NULL,
    ticket     bigint GENERATED ALWAYS AS IDENTITY,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (name, owner)
)
--;
CREATE INDEX IF NOT EXISTS dlock_waiter_queue ON dlock_waiter (name, ticket)
--;
-- Fencing tokens: one sequence for every name, so a token never repeats even when a lock's
-- row is deleted, and never goes back after a crash (a committed token's sequence advance is
-- in the WAL before the commit).
CREATE SEQUENCE IF NOT EXISTS dlock_fence
--;
-- The lock's row, locked; created free if missing.
CREATE OR REPLACE FUNCTION dlock_row_v1(p_name text) RETURNS dlock_lock
LANGUAGE plpgsql AS $$
DECLARE
    l dlock_lock;
BEGIN
    SELECT * INTO l FROM dlock_lock WHERE name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO dlock_lock (name) VALUES (p_name) ON CONFLICT (name) DO NOTHING;
        SELECT * INTO l FROM dlock_lock WHERE name = p_name FOR UPDATE;
    END IF;
    RETURN l;
END $$
--;
-- Milliseconds the holder's lease has left at `t`; -2 when nobody holds the lock (PTTL's word).
CREATE OR REPLACE FUNCTION dlock_pttl_v1(l dlock_lock, t timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN l.owner IS NULL OR l.expires_at <= t THEN -2
                ELSE floor(extract(epoch FROM l.expires_at - t) * 1000)::bigint END
$$
--;
-- The first live waiter of `p_name` and its deadline, dropping dead ones ahead of it.
CREATE OR REPLACE FUNCTION dlock_live_head_v1(p_name text, t timestamptz,
    OUT head text, OUT deadline timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
    LOOP
        SELECT w.owner, w.expires_at INTO head, deadline FROM dlock_waiter w
            WHERE w.name = p_name ORDER BY w.ticket LIMIT 1;
        IF head IS NULL OR deadline > t THEN
            RETURN;
        END IF;
        DELETE FROM dlock_waiter WHERE name = p_name AND owner = head;
    END LOOP;
END $$
--;
-- Makes `p_owner` the holder in a new tenure lasting until `p_until`; returns its token.
CREATE OR REPLACE FUNCTION dlock_grant_v1(p_name text, p_owner text, p_until timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    f bigint;
BEGIN
    UPDATE dlock_lock SET fence = greatest(nextval('dlock_fence'), fence + 1),
        owner = p_owner, holds = 1, expires_at = p_until
        WHERE name = p_name RETURNING fence INTO f;
    RETURN f;
END $$
--;
-- Wakes waiter `head` on its engine's channel: `<token> <fencing token>` or `<token> free`.
CREATE OR REPLACE FUNCTION dlock_wake_v1(head text, word text) RETURNS void
LANGUAGE sql AS $$
    SELECT pg_notify('dlock:wake:' || left(head, 32), head || ' ' || word)
$$
--;
-- Hands a free lock to the first live waiter for the rest of its waiter lease; 1 if one got it.
CREATE OR REPLACE FUNCTION dlock_hand_off_v1(p_name text, t timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    h record;
BEGIN
    h := dlock_live_head_v1(p_name, t);
    IF h.head IS NULL THEN
        UPDATE dlock_lock SET owner = NULL, holds = 0, expires_at = NULL WHERE name = p_name;
        RETURN 0;
    END IF;
    DELETE FROM dlock_waiter WHERE name = p_name AND owner = h.head;
    PERFORM dlock_wake_v1(h.head, dlock_grant_v1(p_name, h.head, h.deadline)::text);
    RETURN 1;
END $$
--;
-- ACQUIRE: as acquire.lua. Replies {1, fencing token, count} acquired | {0, pttl} busy |
-- {3} not queued | {2, pttl, latest fencing token} queued.
CREATE OR REPLACE FUNCTION dlock_acquire_v1(p_name text, p_token text, p_lease bigint,
    p_count bigint, p_mode text, p_wlease bigint, p_flag text)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    l dlock_lock := dlock_row_v1(p_name);
    t timestamptz := clock_timestamp();
    h record;
BEGIN
    IF l.owner = p_token AND l.expires_at > t THEN
        -- Ours already: a reentrant acquire, a retry, or the claim of a hand-off.
        UPDATE dlock_lock SET holds = p_count,
            expires_at = greatest(expires_at, t + p_lease * interval '1 millisecond')
            WHERE name = p_name;
        RETURN ARRAY[1, l.fence, p_count];
    END IF;
    IF p_mode = 'refresh' AND NOT EXISTS (
        SELECT 1 FROM dlock_waiter WHERE name = p_name AND owner = p_token) THEN
        RETURN ARRAY[3]::bigint[];
    END IF;
    IF l.owner IS NULL OR l.expires_at <= t THEN
        h := dlock_live_head_v1(p_name, t);
        IF h.head IS NULL OR h.head = p_token OR p_flag = 'barge' THEN
            DELETE FROM dlock_waiter WHERE name = p_name AND owner = p_token;
            RETURN ARRAY[1, dlock_grant_v1(p_name, p_token,
                t + p_lease * interval '1 millisecond'), 1];
        END IF;
    END IF;
    IF p_mode = 'try' THEN
        RETURN ARRAY[0, dlock_pttl_v1(l, t)];
    END IF;
    INSERT INTO dlock_waiter (name, owner, expires_at)
        VALUES (p_name, p_token, t + p_wlease * interval '1 millisecond')
        ON CONFLICT (name, owner) DO UPDATE SET expires_at = EXCLUDED.expires_at;
    RETURN ARRAY[2, dlock_pttl_v1(l, t), l.fence];
END $$
--;
-- RELEASE: as release.lua. Replies {0} not the owner | {1, count} still held |
-- {2, handed} freed (handed: 1 if a waiter got it).
CREATE OR REPLACE FUNCTION dlock_release_v1(p_name text, p_token text, p_count bigint,
    p_flag text)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    l dlock_lock := dlock_row_v1(p_name);
    t timestamptz := clock_timestamp();
    h record;
BEGIN
    IF l.owner IS DISTINCT FROM p_token OR l.expires_at <= t THEN
        RETURN ARRAY[0]::bigint[];
    END IF;
    IF p_count > 0 THEN
        UPDATE dlock_lock SET holds = p_count WHERE name = p_name;
        RETURN ARRAY[1, p_count]::bigint[];
    END IF;
    IF p_flag = 'free' THEN
        UPDATE dlock_lock SET owner = NULL, holds = 0, expires_at = NULL WHERE name = p_name;
        h := dlock_live_head_v1(p_name, t);
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
    l dlock_lock := dlock_row_v1(p_name);
    t timestamptz := clock_timestamp();
BEGIN
    IF l.owner = p_token AND l.expires_at > t THEN
        PERFORM dlock_hand_off_v1(p_name, t);
        RETURN ARRAY[2]::bigint[];
    END IF;
    DELETE FROM dlock_waiter WHERE name = p_name AND owner = p_token;
    RETURN ARRAY[CASE WHEN FOUND THEN 1 ELSE 0 END]::bigint[];
END $$
--;
-- EXTEND, batched: as extend.lua. Replies one flag per lock: 1 extended (a lease never
-- shrinks), 0 not the owner. Rows are locked in name order, so batches never deadlock.
CREATE OR REPLACE FUNCTION dlock_extend_v1(p_names text[], p_tokens text[], p_leases bigint[])
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    t timestamptz;
    r bigint[] := array_fill(0::bigint, ARRAY[cardinality(p_names)]);
BEGIN
    PERFORM 1 FROM dlock_lock WHERE name = ANY (p_names) ORDER BY name FOR UPDATE;
    t := clock_timestamp();
    FOR i IN 1 .. cardinality(p_names) LOOP
        UPDATE dlock_lock
            SET expires_at = greatest(expires_at, t + p_leases[i] * interval '1 millisecond')
            WHERE name = p_names[i] AND owner = p_tokens[i] AND expires_at > t;
        IF FOUND THEN
            r[i] := 1;
        END IF;
    END LOOP;
    RETURN r;
END $$
--;
-- STATUS, read only: as status.lua. Replies {owner token or '', hold count, tenure's fencing
-- token, pttl, latest fencing token, then the live waiters' tokens in queue order}, as text.
CREATE OR REPLACE FUNCTION dlock_status_v1(p_name text)
RETURNS text[] LANGUAGE plpgsql STABLE AS $$
DECLARE
    l dlock_lock;
    t timestamptz := clock_timestamp();
    held boolean;
BEGIN
    SELECT * INTO l FROM dlock_lock WHERE name = p_name;
    held := l.owner IS NOT NULL AND l.expires_at > t;
    RETURN ARRAY[
        CASE WHEN held THEN l.owner ELSE '' END,
        CASE WHEN held THEN l.holds ELSE 0 END::text,
        CASE WHEN held THEN l.fence ELSE 0 END::text,
        CASE WHEN held THEN dlock_pttl_v1(l, t) ELSE -2 END::text,
        coalesce(l.fence, 0)::text
    ] || ARRAY(SELECT w.owner FROM dlock_waiter w
               WHERE w.name = p_name AND w.expires_at > t ORDER BY w.ticket);
END $$

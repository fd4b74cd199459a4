-- Migration 2: the SQL API for the application's own transaction (delayq.add, delayq.cancel,
-- delayq.reschedule), and the core functions (enqueue, cancel_task, reschedule_task) that
-- the backend's own add, cancel and reschedule call too, so the two paths are one logic.
-- `{s}` is the schema. Every name is qualified: the application's search_path is its own.

-- The limits and defaults of the instances, which the SQL functions apply (each instance
-- writes its own at start: the last one started wins).
CREATE TABLE {s}.sql_config (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    max_body_bytes bigint NOT NULL,
    max_delay_ms bigint NOT NULL,
    max_ttr_ms bigint NOT NULL,
    default_ttr_ms bigint NOT NULL,
    default_max_retries bigint NOT NULL,
    retention_ms bigint NOT NULL,
    max_schedule_len bigint NOT NULL
);
INSERT INTO {s}.sql_config VALUES (true, 1048576, 315576000000, 86400000, 30000, 3, 60000, 64);

-- The database's clock in epoch ms, rounded up: a due counted from it is never early.
CREATE FUNCTION {s}.now_ms() RETURNS bigint LANGUAGE sql VOLATILE
AS $$ SELECT ceil(extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;

-- Raises invalid_parameter_value (22023) naming the function and the field (also in the
-- error's COLUMN field).
CREATE FUNCTION {s}.invalid(func text, field text, reason text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%: invalid %: %', func, field, reason
        USING ERRCODE = '22023', COLUMN = field;
END $$;

-- A topic, id or key (`delayq_core::validate::check_name`): not NULL, 1 to max_len bytes, no
-- character that `bad` matches.
CREATE FUNCTION {s}.check_name(func text, field text, value text, max_len int, bad text,
                               extra text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    c text;
BEGIN
    IF value IS NULL THEN
        PERFORM {s}.invalid(func, field, 'is required (got NULL)');
    ELSIF value = '' THEN
        PERFORM {s}.invalid(func, field, 'must not be empty');
    ELSIF octet_length(value) > max_len THEN
        PERFORM {s}.invalid(func, field, format('is %s characters long, the limit is %s',
                                                  octet_length(value), max_len));
    END IF;
    c := substring(value FROM bad);
    IF c IS NOT NULL THEN
        PERFORM {s}.invalid(func, field, format(
            'has the character %L at byte %s; allowed are letters, digits and %s',
            c, octet_length(split_part(value, c, 1)), extra));
    END IF;
END $$;

CREATE FUNCTION {s}.check_topic_id(func text, topic text, id text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {s}.check_name(func, 'topic', topic, 200, '[^A-Za-z0-9._:+/;$()-]', '._:+/;$()-');
    PERFORM {s}.check_name(func, 'id', id, 256, '[^A-Za-z0-9._:@/+=-]', '._:@/+=-');
END $$;

-- A duration in ms from lo to hi.
CREATE FUNCTION {s}.check_ms(func text, field text, value bigint, lo bigint, hi bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF value < lo OR value > hi THEN
        PERFORM {s}.invalid(func, field,
            format('must be between %s and %s ms (got %s)', lo, hi, value));
    END IF;
END $$;

-- The due of delay_ms or run_at_ms (neither: now), checked against the longest delay (the
-- library's `validate::check_duration` and `check_run_at`).
CREATE FUNCTION {s}.due_of(func text, now_ms bigint, delay_ms bigint, run_at_ms bigint,
                           max_delay_ms bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF delay_ms IS NOT NULL AND run_at_ms IS NOT NULL THEN
        PERFORM {s}.invalid(func, 'run_at_ms',
            'cannot be given together with delay_ms; give one of them');
    END IF;
    IF run_at_ms IS NOT NULL THEN
        IF run_at_ms > now_ms AND run_at_ms - now_ms > max_delay_ms THEN
            PERFORM {s}.invalid(func, 'run_at_ms', format(
                'is %s ms in the future, the limit is %s ms', run_at_ms - now_ms, max_delay_ms));
        END IF;
        -- A past instant means now: a task is never due before it was added or moved.
        RETURN greatest(run_at_ms, now_ms);
    END IF;
    PERFORM {s}.check_ms(func, 'delay_ms', coalesce(delay_ms, 0), 0, max_delay_ms);
    RETURN now_ms + coalesce(delay_ms, 0);
END $$;

-- A JSON number of whole milliseconds (>= 0, within bigint).
CREATE FUNCTION {s}.json_ms(func text, field text, v jsonb) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF v IS NULL OR jsonb_typeof(v) <> 'number' OR v::numeric <> trunc(v::numeric)
            OR v::numeric < 0 OR v::numeric > 9223372036854775807 THEN
        PERFORM {s}.invalid(func, field, format('must be a whole number of ms >= 0 (got %s)',
                                                  coalesce(v::text, 'nothing')));
    END IF;
    RETURN v::numeric::bigint;
END $$;

-- A retry schedule as the JSON API writes it (`{"kind":"fixed","ms":N}`,
-- `{"kind":"exponential","base_ms":N,"max_ms":M}`, `{"kind":"schedule","ms":[...]}`), checked
-- as the library's `validate::check_backoff`; returns the form the backend stores.
CREATE FUNCTION {s}.check_backoff(func text, b jsonb, max_delay_ms bigint, max_len bigint)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    kind text;
    base bigint;
    cap bigint;
    n int;
    waits bigint[] := '{}';
    field text;
BEGIN
    IF jsonb_typeof(b) IS DISTINCT FROM 'object' THEN
        PERFORM {s}.invalid(func, 'backoff', format(
            'is %s; give an object of kind ''fixed'', ''exponential'' or ''schedule''', b));
    END IF;
    kind := b->>'kind';
    IF kind = 'fixed' THEN
        base := {s}.json_ms(func, 'backoff.ms', b->'ms');
        PERFORM {s}.check_ms(func, 'backoff.ms', base, 0, max_delay_ms);
        RETURN jsonb_build_object('kind', kind, 'ms', base);
    ELSIF kind = 'exponential' THEN
        base := {s}.json_ms(func, 'backoff.base_ms', b->'base_ms');
        cap := {s}.json_ms(func, 'backoff.max_ms', b->'max_ms');
        IF base = 0 THEN
            PERFORM {s}.invalid(func, 'backoff.base_ms', 'must be at least 1 ms');
        END IF;
        IF cap < base THEN
            PERFORM {s}.invalid(func, 'backoff.max_ms',
                format('is %s ms, less than base_ms (%s ms)', cap, base));
        END IF;
        PERFORM {s}.check_ms(func, 'backoff.max_ms', cap, 0, max_delay_ms);
        RETURN jsonb_build_object('kind', kind, 'base_ms', base, 'max_ms', cap);
    ELSIF kind = 'schedule' THEN
        IF jsonb_typeof(b->'ms') IS DISTINCT FROM 'array' THEN
            PERFORM {s}.invalid(func, 'backoff.ms', 'must be a list of waits in ms');
        END IF;
        n := jsonb_array_length(b->'ms');
        IF n = 0 THEN
            PERFORM {s}.invalid(func, 'backoff.ms', 'must list at least one wait');
        ELSIF n > max_len THEN
            PERFORM {s}.invalid(func, 'backoff.ms',
                format('lists %s waits, the limit is %s', n, max_len));
        END IF;
        FOR i IN 0 .. n - 1 LOOP
            field := format('backoff.ms[%s]', i);
            base := {s}.json_ms(func, field, b->'ms'->i);
            PERFORM {s}.check_ms(func, field, base, 0, max_delay_ms);
            waits := waits || base;
        END LOOP;
        RETURN jsonb_build_object('kind', kind, 'ms', to_jsonb(waits));
    END IF;
    PERFORM {s}.invalid(func, 'backoff.kind', format(
        'is %s; accepted are ''fixed'', ''exponential'' and ''schedule''',
        coalesce(quote_literal(kind), 'missing')));
    RETURN NULL;
END $$;

-- The core of every add (the backend's and delayq.add): inserts the task, READY if its due
-- has come, else DELAYED, per the duplicate policy (0 reject, 1 replace, 2 keep), and
-- notifies: the topic's consumers when it is READY (`<sender>|r|<topic>`), and, for an
-- application's call (sender NULL: no instance applies its timers), the drivers of its due
-- and expiry (`sql|t|<ms>`). NOTIFY is delivered on commit only.
-- outcome: 0 added, 1 replaced, 2 existed (keep), 3 existed (reject: nothing done);
-- new_state and due: the task's (for 2 and 3, the existing task's).
CREATE FUNCTION {s}.enqueue(
    p_now bigint, p_sender text, p_on_duplicate smallint,
    p_topic text, p_id text, p_body bytea, p_priority bigint, p_due bigint, p_created bigint,
    p_ttr bigint, p_max_retries bigint, p_expires bigint, p_on_expire smallint, p_key text,
    p_trace jsonb, p_extra jsonb,
    OUT outcome smallint, OUT new_state smallint, OUT due bigint)
LANGUAGE plpgsql AS $$
DECLARE
    inserted boolean;
BEGIN
    new_state := CASE WHEN p_due <= p_now THEN 1 ELSE 0 END;
    due := p_due;
    IF p_on_duplicate = 1 THEN
        INSERT INTO {s}.tasks AS t (topic, id, state, priority, due_ms, deadline_ms,
            updated_at_ms, created_at_ms, receipt, retries, ttr_ms, max_retries,
            expires_at_ms, on_expire, key, body, trace, extra)
        VALUES (p_topic, p_id, new_state, p_priority, p_due, 0, p_now, p_created, NULL, 0,
            p_ttr, p_max_retries, p_expires, p_on_expire, p_key, p_body, p_trace, p_extra)
        ON CONFLICT (topic, id) DO UPDATE SET state = EXCLUDED.state,
            priority = EXCLUDED.priority, due_ms = EXCLUDED.due_ms, deadline_ms = 0,
            updated_at_ms = EXCLUDED.updated_at_ms, created_at_ms = EXCLUDED.created_at_ms,
            receipt = NULL, retries = 0, ttr_ms = EXCLUDED.ttr_ms,
            max_retries = EXCLUDED.max_retries, expires_at_ms = EXCLUDED.expires_at_ms,
            on_expire = EXCLUDED.on_expire, key = EXCLUDED.key, body = EXCLUDED.body,
            trace = EXCLUDED.trace, extra = EXCLUDED.extra, seq = nextval('{s}.task_seq')
        RETURNING (t.xmax = 0) INTO inserted;
        outcome := CASE WHEN inserted THEN 0 ELSE 1 END;
    ELSE
        INSERT INTO {s}.tasks (topic, id, state, priority, due_ms, deadline_ms,
            updated_at_ms, created_at_ms, receipt, retries, ttr_ms, max_retries,
            expires_at_ms, on_expire, key, body, trace, extra)
        VALUES (p_topic, p_id, new_state, p_priority, p_due, 0, p_now, p_created, NULL, 0,
            p_ttr, p_max_retries, p_expires, p_on_expire, p_key, p_body, p_trace, p_extra)
        ON CONFLICT (topic, id) DO NOTHING;
        IF NOT FOUND THEN
            SELECT t.state, t.due_ms INTO new_state, due FROM {s}.tasks t
                WHERE t.topic = p_topic AND t.id = p_id;
            outcome := CASE WHEN p_on_duplicate = 2 THEN 2 ELSE 3 END;
            RETURN;
        END IF;
        outcome := 0;
    END IF;
    IF new_state = 1 THEN
        PERFORM pg_notify('{s}_events', coalesce(p_sender, 'sql') || '|r|' || p_topic);
    ELSIF p_sender IS NULL THEN
        PERFORM pg_notify('{s}_events', 'sql|t|' || p_due);
    END IF;
    IF p_expires IS NOT NULL AND p_sender IS NULL THEN
        PERFORM pg_notify('{s}_events', 'sql|t|' || p_expires);
    END IF;
END $$;

-- The core of every cancel: DELAYED, READY or ACTIVE → CANCELLED until now + retention.
-- prior: the state the task was in (-1: no such task); changed only when 0, 1 or 2. woke:
-- an ACTIVE task of a topic with max_active or max_active_per_key freed a slot, and the
-- topic's consumers were notified.
CREATE FUNCTION {s}.cancel_task(p_now bigint, p_retention bigint, p_sender text,
                                p_topic text, p_id text, OUT prior smallint, OUT woke boolean)
LANGUAGE plpgsql AS $$
BEGIN
    woke := false;
    SELECT t.state INTO prior FROM {s}.tasks t
        WHERE t.topic = p_topic AND t.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        prior := -1;
        RETURN;
    END IF;
    IF prior NOT IN (0, 1, 2) THEN
        RETURN;
    END IF;
    UPDATE {s}.tasks t SET state = 4, deadline_ms = p_now + p_retention,
        updated_at_ms = p_now, receipt = NULL
        WHERE t.topic = p_topic AND t.id = p_id;
    IF prior = 2 AND EXISTS (SELECT 1 FROM {s}.topics p WHERE p.topic = p_topic
            AND p.limits ?| array['max_active', 'max_active_per_key']) THEN
        woke := true;
        PERFORM pg_notify('{s}_events', coalesce(p_sender, 'sql') || '|r|' || p_topic);
    END IF;
    IF p_sender IS NULL THEN
        PERFORM pg_notify('{s}_events', 'sql|t|' || (p_now + p_retention));
    END IF;
END $$;

-- The core of every reschedule: DELAYED or READY → the new due (READY if it has come).
-- prior: the state the task was in (-1: no such task); changed only when 0 or 1 and the due
-- comes before the task's expiry (expires_at); new_state: its state now, NULL when nothing
-- changed.
CREATE FUNCTION {s}.reschedule_task(p_now bigint, p_sender text, p_topic text, p_id text,
                                    p_due bigint, OUT prior smallint, OUT new_state smallint,
                                    OUT expires_at bigint)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT t.state, t.expires_at_ms INTO prior, expires_at FROM {s}.tasks t
        WHERE t.topic = p_topic AND t.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        prior := -1;
        RETURN;
    END IF;
    IF prior NOT IN (0, 1) OR (expires_at IS NOT NULL AND p_due >= expires_at) THEN
        RETURN;
    END IF;
    new_state := CASE WHEN p_due <= p_now THEN 1 ELSE 0 END;
    UPDATE {s}.tasks t SET state = new_state, due_ms = p_due, deadline_ms = 0,
        updated_at_ms = p_now, receipt = NULL
        WHERE t.topic = p_topic AND t.id = p_id;
    IF new_state = 1 THEN
        PERFORM pg_notify('{s}_events', coalesce(p_sender, 'sql') || '|r|' || p_topic);
    ELSIF p_sender IS NULL THEN
        PERFORM pg_notify('{s}_events', 'sql|t|' || p_due);
    END IF;
END $$;

-- delayq.add: the application's add, validated as the HTTP API and the library validate
-- (`delayq_core::validate::validate_task`) against the limits in sql_config. NULL for an
-- optional argument means its default.
CREATE FUNCTION {s}.add(
    topic text, id text, body bytea,
    delay_ms bigint DEFAULT NULL, run_at_ms bigint DEFAULT NULL,
    priority bigint DEFAULT NULL, ttr_ms bigint DEFAULT NULL, max_retries bigint DEFAULT NULL,
    key text DEFAULT NULL, expires_in_ms bigint DEFAULT NULL, expires_at_ms bigint DEFAULT NULL,
    on_expire text DEFAULT NULL, on_duplicate text DEFAULT NULL, backoff jsonb DEFAULT NULL,
    OUT outcome text, OUT due_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    f constant text := '{s}.add';
    cfg {s}.sql_config;
    t_now bigint := {s}.now_ms();
    t_due bigint;
    t_expires bigint;
    t_field text;
    t_ttr bigint;
    t_retries bigint;
    t_priority bigint;
    t_on_expire smallint;
    t_policy smallint;
    t_extra jsonb;
    r record;
BEGIN
    SELECT * INTO STRICT cfg FROM {s}.sql_config;
    PERFORM {s}.check_topic_id(f, topic, id);
    IF key IS NOT NULL THEN
        PERFORM {s}.check_name(f, 'key', key, 256, '[^A-Za-z0-9._:@/+=-]', '._:@/+=-');
    END IF;
    IF body IS NULL THEN
        PERFORM {s}.invalid(f, 'body', 'is NULL; give '''' for an empty body');
    END IF;
    IF octet_length(body) > cfg.max_body_bytes THEN
        RAISE EXCEPTION '%: invalid body: is % bytes, the limit is % bytes', f,
            octet_length(body), cfg.max_body_bytes
            USING ERRCODE = '54000', COLUMN = 'body';
    END IF;
    t_due := {s}.due_of(f, t_now, delay_ms, run_at_ms, cfg.max_delay_ms);
    IF expires_in_ms IS NOT NULL AND expires_at_ms IS NOT NULL THEN
        PERFORM {s}.invalid(f, 'expires_in_ms',
            'cannot be given together with expires_at_ms; give one of them');
    ELSIF expires_in_ms IS NOT NULL THEN
        t_field := 'expires_in_ms';
        PERFORM {s}.check_ms(f, t_field, expires_in_ms, 0, cfg.max_delay_ms);
        t_expires := t_now + expires_in_ms;
    ELSIF expires_at_ms IS NOT NULL THEN
        t_field := 'expires_at_ms';
        IF expires_at_ms > t_now AND expires_at_ms - t_now > cfg.max_delay_ms THEN
            PERFORM {s}.invalid(f, t_field, format('is %s ms in the future, the limit is %s ms',
                expires_at_ms - t_now, cfg.max_delay_ms));
        END IF;
        t_expires := expires_at_ms;
    END IF;
    IF t_expires IS NOT NULL AND t_expires <= t_due THEN
        PERFORM {s}.invalid(f, t_field, format('expires at %s, at or before the task''s due '
            '(%s); an expiry must come after the due', t_expires, t_due));
    END IF;
    t_ttr := coalesce(ttr_ms, cfg.default_ttr_ms);
    PERFORM {s}.check_ms(f, 'ttr_ms', t_ttr, 1, cfg.max_ttr_ms);
    IF backoff IS NOT NULL THEN
        t_extra := jsonb_build_object('backoff', {s}.check_backoff(f, backoff, cfg.max_delay_ms,
                                                                   cfg.max_schedule_len));
    END IF;
    t_priority := coalesce(priority, 1024);
    IF t_priority < 0 OR t_priority > 4294967295 THEN
        PERFORM {s}.invalid(f, 'priority',
            format('must be between 0 and 4294967295 (got %s)', t_priority));
    END IF;
    t_retries := coalesce(max_retries, cfg.default_max_retries);
    IF t_retries < -1 OR t_retries > 4294967295 THEN
        PERFORM {s}.invalid(f, 'max_retries', format(
            'must be -1 (no limit) or a count from 0 to 4294967295 (got %s)', t_retries));
    END IF;
    t_on_expire := CASE coalesce(on_expire, 'dead') WHEN 'dead' THEN 0 WHEN 'drop' THEN 1 END;
    IF t_on_expire IS NULL THEN
        PERFORM {s}.invalid(f, 'on_expire',
            format('is %L; accepted are ''dead'' and ''drop''', on_expire));
    END IF;
    t_policy := CASE coalesce(on_duplicate, 'reject')
        WHEN 'reject' THEN 0 WHEN 'replace' THEN 1 WHEN 'keep' THEN 2 END;
    IF t_policy IS NULL THEN
        PERFORM {s}.invalid(f, 'on_duplicate',
            format('is %L; accepted are ''reject'', ''replace'' and ''keep''', on_duplicate));
    END IF;
    SELECT * INTO STRICT r FROM {s}.enqueue(t_now, NULL, t_policy, topic, id, body,
        t_priority, t_due, t_now, t_ttr, t_retries, t_expires, t_on_expire, key, NULL, t_extra);
    IF r.outcome = 3 THEN
        RAISE EXCEPTION '%: the task % of topic % exists', f, quote_literal(id),
            quote_literal(topic)
            USING ERRCODE = '23505', COLUMN = 'id',
                  HINT = 'on_duplicate => ''keep'' leaves it, ''replace'' replaces it';
    END IF;
    outcome := CASE r.outcome WHEN 0 THEN 'added' WHEN 1 THEN 'replaced' ELSE 'existed' END;
    due_ms := r.due;
END $$;

-- The same with a text body (stored as its UTF-8 bytes; the body may be left out: empty) or
-- a jsonb one (its text).
CREATE FUNCTION {s}.add(
    topic text, id text, body text DEFAULT '',
    delay_ms bigint DEFAULT NULL, run_at_ms bigint DEFAULT NULL,
    priority bigint DEFAULT NULL, ttr_ms bigint DEFAULT NULL, max_retries bigint DEFAULT NULL,
    key text DEFAULT NULL, expires_in_ms bigint DEFAULT NULL, expires_at_ms bigint DEFAULT NULL,
    on_expire text DEFAULT NULL, on_duplicate text DEFAULT NULL, backoff jsonb DEFAULT NULL,
    OUT outcome text, OUT due_ms bigint)
LANGUAGE plpgsql AS $$
BEGIN
    -- plpgsql, not sql: its plan is kept for the session, where a sql function's call from
    -- a plpgsql caller is planned again at each call.
    SELECT a.outcome, a.due_ms INTO outcome, due_ms
        FROM {s}.add(topic, id, convert_to(body, 'UTF8'), delay_ms, run_at_ms, priority,
                     ttr_ms, max_retries, key, expires_in_ms, expires_at_ms, on_expire,
                     on_duplicate, backoff) a;
END $$;
CREATE FUNCTION {s}.add(
    topic text, id text, body jsonb,
    delay_ms bigint DEFAULT NULL, run_at_ms bigint DEFAULT NULL,
    priority bigint DEFAULT NULL, ttr_ms bigint DEFAULT NULL, max_retries bigint DEFAULT NULL,
    key text DEFAULT NULL, expires_in_ms bigint DEFAULT NULL, expires_at_ms bigint DEFAULT NULL,
    on_expire text DEFAULT NULL, on_duplicate text DEFAULT NULL, backoff jsonb DEFAULT NULL,
    OUT outcome text, OUT due_ms bigint)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT a.outcome, a.due_ms INTO outcome, due_ms
        FROM {s}.add(topic, id, convert_to(body::text, 'UTF8'), delay_ms, run_at_ms, priority,
                     ttr_ms, max_retries, key, expires_in_ms, expires_at_ms, on_expire,
                     on_duplicate, backoff) a;
END $$;

-- delayq.cancel: true when this call cancelled the task (it will never be delivered again),
-- false when there is nothing to cancel: no such task, or it already ended (finished,
-- cancelled, dead).
CREATE FUNCTION {s}.cancel(topic text, id text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    cfg {s}.sql_config;
    r record;
BEGIN
    PERFORM {s}.check_topic_id('{s}.cancel', topic, id);
    SELECT * INTO STRICT cfg FROM {s}.sql_config;
    SELECT * INTO STRICT r FROM {s}.cancel_task({s}.now_ms(), cfg.retention_ms, NULL, topic, id);
    RETURN r.prior IN (0, 1, 2);
END $$;

-- delayq.reschedule: a DELAYED or READY task gets a new due (delay_ms from now, or run_at_ms;
-- neither: now). True when rescheduled, false when there is no such task or it is not
-- DELAYED or READY (ACTIVE, or ended). A due at or after the task's expiry raises.
CREATE FUNCTION {s}.reschedule(topic text, id text, delay_ms bigint DEFAULT NULL,
                               run_at_ms bigint DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    f constant text := '{s}.reschedule';
    cfg {s}.sql_config;
    t_now bigint := {s}.now_ms();
    t_due bigint;
    r record;
BEGIN
    PERFORM {s}.check_topic_id(f, topic, id);
    SELECT * INTO STRICT cfg FROM {s}.sql_config;
    t_due := {s}.due_of(f, t_now, delay_ms, run_at_ms, cfg.max_delay_ms);
    SELECT * INTO STRICT r FROM {s}.reschedule_task(t_now, NULL, topic, id, t_due);
    IF r.prior IN (0, 1) AND r.new_state IS NULL THEN
        PERFORM {s}.invalid(f, CASE WHEN run_at_ms IS NULL THEN 'delay_ms' ELSE 'run_at_ms' END,
            format('the new due %s is at or after the task''s expiry (%s); a due must come '
                   'before it', t_due, r.expires_at));
    END IF;
    RETURN r.new_state IS NOT NULL;
END $$;

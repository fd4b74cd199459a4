-- Migration 3: enqueue_batch, a batch of adds in a few statements, where the backend called
-- enqueue once a task. It answers what calling enqueue once a task, in batch order, would:
-- the first occurrences of ids not in the table go in with one INSERT; the rest (ids that
-- exist, later occurrences of an id in the batch) are resolved one after the other, in batch
-- order, by enqueue_row, the per-task logic that enqueue now calls as well.
-- `{s}` is the schema. Every name is qualified.

-- The row logic of enqueue without its notices: inserts the task with the insertion order
-- p_seq, READY if its due has come, else DELAYED, per the duplicate policy (0 reject,
-- 1 replace, 2 keep). outcome: 0 added, 1 replaced, 2 existed (keep), 3 existed (reject:
-- nothing done); new_state and due: the task's (for 2 and 3, the existing task's).
CREATE FUNCTION {s}.enqueue_row(
    p_now bigint, p_seq bigint, p_on_duplicate smallint,
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
        INSERT INTO {s}.tasks AS t (topic, id, state, priority, due_ms, seq, deadline_ms,
            updated_at_ms, created_at_ms, receipt, retries, ttr_ms, max_retries,
            expires_at_ms, on_expire, key, body, trace, extra)
        VALUES (p_topic, p_id, new_state, p_priority, p_due, p_seq, 0, p_now, p_created,
            NULL, 0, p_ttr, p_max_retries, p_expires, p_on_expire, p_key, p_body, p_trace,
            p_extra)
        ON CONFLICT (topic, id) DO UPDATE SET state = EXCLUDED.state,
            priority = EXCLUDED.priority, due_ms = EXCLUDED.due_ms, deadline_ms = 0,
            updated_at_ms = EXCLUDED.updated_at_ms, created_at_ms = EXCLUDED.created_at_ms,
            receipt = NULL, retries = 0, ttr_ms = EXCLUDED.ttr_ms,
            max_retries = EXCLUDED.max_retries, expires_at_ms = EXCLUDED.expires_at_ms,
            on_expire = EXCLUDED.on_expire, key = EXCLUDED.key, body = EXCLUDED.body,
            trace = EXCLUDED.trace, extra = EXCLUDED.extra, seq = EXCLUDED.seq
        RETURNING (t.xmax = 0) INTO inserted;
        outcome := CASE WHEN inserted THEN 0 ELSE 1 END;
        RETURN;
    END IF;
    INSERT INTO {s}.tasks (topic, id, state, priority, due_ms, seq, deadline_ms,
        updated_at_ms, created_at_ms, receipt, retries, ttr_ms, max_retries,
        expires_at_ms, on_expire, key, body, trace, extra)
    VALUES (p_topic, p_id, new_state, p_priority, p_due, p_seq, 0, p_now, p_created, NULL, 0,
        p_ttr, p_max_retries, p_expires, p_on_expire, p_key, p_body, p_trace, p_extra)
    ON CONFLICT (topic, id) DO NOTHING;
    IF FOUND THEN
        outcome := 0;
        RETURN;
    END IF;
    SELECT t.state, t.due_ms INTO new_state, due FROM {s}.tasks t
        WHERE t.topic = p_topic AND t.id = p_id;
    outcome := CASE WHEN p_on_duplicate = 2 THEN 2 ELSE 3 END;
END $$;

-- enqueue as migration 2 defined it (the arguments, the answer, the notices), its row logic
-- now enqueue_row's, shared with enqueue_batch.
CREATE OR REPLACE FUNCTION {s}.enqueue(
    p_now bigint, p_sender text, p_on_duplicate smallint,
    p_topic text, p_id text, p_body bytea, p_priority bigint, p_due bigint, p_created bigint,
    p_ttr bigint, p_max_retries bigint, p_expires bigint, p_on_expire smallint, p_key text,
    p_trace jsonb, p_extra jsonb,
    OUT outcome smallint, OUT new_state smallint, OUT due bigint)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT r.outcome, r.new_state, r.due INTO outcome, new_state, due
        FROM {s}.enqueue_row(p_now, nextval('{s}.task_seq'), p_on_duplicate, p_topic, p_id,
            p_body, p_priority, p_due, p_created, p_ttr, p_max_retries, p_expires,
            p_on_expire, p_key, p_trace, p_extra) r;
    IF outcome > 1 THEN
        RETURN;
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

-- enqueue for a batch: the i-th element of every array is the i-th task (the arrays are as
-- long as each other), p_now and p_sender are the batch's. Answers enqueue's outcome,
-- new_state and due of every task, in batch order, and sends the notices enqueue's calls
-- would (a topic's `<sender>|r|<topic>` once: identical notices of one transaction fold).
CREATE FUNCTION {s}.enqueue_batch(
    p_now bigint, p_sender text, p_on_duplicate smallint[],
    p_topic text[], p_id text[], p_body bytea[], p_priority bigint[], p_due bigint[],
    p_created bigint[], p_ttr bigint[], p_max_retries bigint[], p_expires bigint[],
    p_on_expire smallint[], p_key text[], p_trace jsonb[], p_extra jsonb[],
    OUT outcomes smallint[], OUT new_states smallint[], OUT dues bigint[])
LANGUAGE plpgsql AS $$
DECLARE
    n int := coalesce(cardinality(p_id), 0);
    seqs bigint[];
    added bigint[];
    bad record;
    r record;
    one record;
BEGIN
    SELECT a.name, a.len INTO bad FROM (VALUES
        ('p_on_duplicate', cardinality(p_on_duplicate)), ('p_topic', cardinality(p_topic)),
        ('p_body', cardinality(p_body)), ('p_priority', cardinality(p_priority)),
        ('p_due', cardinality(p_due)), ('p_created', cardinality(p_created)),
        ('p_ttr', cardinality(p_ttr)), ('p_max_retries', cardinality(p_max_retries)),
        ('p_expires', cardinality(p_expires)), ('p_on_expire', cardinality(p_on_expire)),
        ('p_key', cardinality(p_key)), ('p_trace', cardinality(p_trace)),
        ('p_extra', cardinality(p_extra))) a(name, len)
        WHERE a.len IS DISTINCT FROM n LIMIT 1;
    IF FOUND THEN
        PERFORM {s}.invalid('{s}.enqueue_batch', bad.name, format(
            'has %s elements where p_id has %s; give one element a task',
            coalesce(bad.len::text, 'NULL (no array)'), n));
    END IF;
    outcomes := '{}';
    new_states := '{}';
    dues := '{}';
    IF n = 0 THEN
        RETURN;
    END IF;
    -- The insertion order (rule 11) of the i-th task is the i-th smallest: enqueue's calls in
    -- batch order would have drawn them in that order.
    seqs := ARRAY(SELECT nextval('{s}.task_seq') FROM generate_series(1, n) ORDER BY 1);
    -- In batch order, so of the occurrences of an id that is not in the table the first goes
    -- in and the later ones conflict with it.
    WITH ins AS (
        INSERT INTO {s}.tasks AS t (topic, id, state, priority, due_ms, seq, deadline_ms,
            updated_at_ms, created_at_ms, receipt, retries, ttr_ms, max_retries,
            expires_at_ms, on_expire, key, body, trace, extra)
        SELECT v.topic, v.id, CASE WHEN v.due_ms <= p_now THEN 1 ELSE 0 END, v.priority,
            v.due_ms, seqs[v.nth::int], 0, p_now, v.created, NULL, 0, v.ttr, v.max_retries,
            v.expires, v.on_expire, v.key, v.body, v.trace, v.extra
        FROM unnest(p_topic, p_id, p_body, p_priority, p_due, p_created, p_ttr, p_max_retries,
                    p_expires, p_on_expire, p_key, p_trace, p_extra) WITH ORDINALITY
            AS v(topic, id, body, priority, due_ms, created, ttr, max_retries, expires,
                 on_expire, key, trace, extra, nth)
        ORDER BY v.nth
        ON CONFLICT (topic, id) DO NOTHING
        RETURNING t.seq)
    SELECT coalesce(array_agg(ins.seq), '{}') INTO added FROM ins;
    -- What went in was added: enqueue's outcome 0, in the state its due gives.
    outcomes := array_fill(0::smallint, ARRAY[n]);
    new_states := ARRAY(SELECT CASE WHEN u.d <= p_now THEN 1 ELSE 0 END::smallint
        FROM unnest(p_due) WITH ORDINALITY u(d, nth) ORDER BY u.nth);
    dues := p_due;
    IF cardinality(added) < n THEN
        -- The rest, one after the other in batch order, as enqueue would.
        FOR r IN
            SELECT v.i::int AS nth, v.* FROM unnest(p_on_duplicate, p_topic, p_id, p_body,
                    p_priority, p_due, p_created, p_ttr, p_max_retries, p_expires,
                    p_on_expire, p_key, p_trace, p_extra) WITH ORDINALITY
                AS v(policy, topic, id, body, priority, due_ms, created, ttr, max_retries,
                     expires, on_expire, key, trace, extra, i)
            LEFT JOIN unnest(added) a(seq) ON a.seq = seqs[v.i::int]
            WHERE a.seq IS NULL
            ORDER BY v.i
        LOOP
            SELECT * INTO STRICT one FROM {s}.enqueue_row(p_now, seqs[r.nth], r.policy, r.topic,
                r.id, r.body, r.priority, r.due_ms, r.created, r.ttr, r.max_retries, r.expires,
                r.on_expire, r.key, r.trace, r.extra);
            outcomes[r.nth] := one.outcome;
            new_states[r.nth] := one.new_state;
            dues[r.nth] := one.due;
        END LOOP;
    END IF;
    -- enqueue's notices of the tasks added or replaced, in the order of their first task.
    PERFORM pg_notify('{s}_events', coalesce(p_sender, 'sql') || '|r|' || w.topic)
        FROM (SELECT u.topic, min(u.nth) AS first
              FROM unnest(p_topic, outcomes, new_states) WITH ORDINALITY u(topic, o, st, nth)
              WHERE u.o <= 1 AND u.st = 1 GROUP BY u.topic) w
        ORDER BY w.first;
    IF p_sender IS NULL THEN
        -- An application's call: no instance applies its timers; the drivers hear of them.
        PERFORM pg_notify('{s}_events', 'sql|t|' || w.at)
            FROM (SELECT x.at, min(x.nth) AS first FROM (
                      SELECT u.nth, u.d AS at FROM unnest(outcomes, new_states, p_due)
                          WITH ORDINALITY u(o, st, d, nth) WHERE u.o <= 1 AND u.st = 0
                      UNION ALL
                      SELECT u.nth, u.e FROM unnest(outcomes, p_expires)
                          WITH ORDINALITY u(o, e, nth) WHERE u.o <= 1 AND u.e IS NOT NULL) x
                  GROUP BY x.at) w
            ORDER BY w.first;
    END IF;
END $$;

-- Migration 4: the primary key leads with the id, (id, topic) where it was (topic, id), and
-- the index on the id alone goes. A lookup by id alone (beanstalkd's job ids name no tube)
-- reads the key's prefix instead; a lookup of (topic, id) reads the whole key either way;
-- the scans of one topic read tasks_topic_state_due and tasks_ready, which lead with it.
-- Every state change writes a new row version into every index whose predicate it meets
-- (a change of state is never a HOT update), so one index fewer is a fifth less index work
-- for each promotion, hand-out and finish. `ON CONFLICT (topic, id)` infers the key in
-- either order. `{s}` is the schema.
ALTER TABLE {s}.tasks DROP CONSTRAINT tasks_pkey;
ALTER TABLE {s}.tasks ADD CONSTRAINT tasks_pkey PRIMARY KEY (id, topic);
DROP INDEX {s}.tasks_id;

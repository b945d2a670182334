-- No index holds the state (so that the intent's updates are HOT:
-- migration 015), so a list by state reads the namespace's rows newest
-- first, except for the rare states, found where only they are: the
-- unknown intents in their table, the intents that awaited approval by
-- the index of approval_rule (set on insert only). {{only}} is where each
-- list narrows.
SELECT {{columns}}, {{job_kind}} FROM {{schema}}.outbox_intent i
WHERE {{only}}namespace = $1
  AND (cardinality($2::text[]) = 0 OR state = ANY($2::text[]))
  AND ($3::text = '' OR effect = $3::text)
  AND ($4::bigint = 0 OR id < $4::bigint)
ORDER BY id DESC
LIMIT $5

-- outbox_noop_effect is the sandbox's fixture table (where its noop effect
-- records what it did, so that tests and benchmarks can count effects), not
-- part of the product: it leaves every user's schema. The sandbox, the
-- demo and the tests create it where they need it
-- (internal/fixture/noop.EnsureTable).
DROP TABLE IF EXISTS {{schema}}.outbox_noop_effect;

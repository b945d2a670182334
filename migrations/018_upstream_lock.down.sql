DROP TABLE IF EXISTS {{schema}}.outbox_upstream_lock;

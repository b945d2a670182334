DROP TABLE IF EXISTS {{schema}}.outbox_mcp_state_used;
DROP TABLE IF EXISTS {{schema}}.outbox_state_key;

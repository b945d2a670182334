-- Jobs of dead processes are then left to River's rescuer again.
DROP TABLE IF EXISTS {{schema}}.outbox_process;

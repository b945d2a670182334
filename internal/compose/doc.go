// Package compose holds the test of the repository's docker-compose.yml and
// Dockerfile: there is no Docker engine where the tests run, so the file is
// loaded with compose-go, the library docker compose itself uses, and its
// services, dependencies, health checks and variables are checked.
package compose

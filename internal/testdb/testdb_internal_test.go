package testdb

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReplaceDatabase(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name, connString, want string
	}{
		{
			name:       "URL",
			connString: "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
			want:       "postgres://postgres@127.0.0.1:5432/t_db?sslmode=disable",
		},
		{
			name:       "URLWithoutDatabase",
			connString: "postgresql://user:p%40ss@localhost?sslmode=disable&application_name=x",
			want:       "postgresql://user:p%40ss@localhost/t_db?sslmode=disable&application_name=x",
		},
		{
			name:       "URLWithoutDatabaseOrQuery",
			connString: "postgres://localhost:5433",
			want:       "postgres://localhost:5433/t_db",
		},
		{
			name:       "URLWithDbnameParameter",
			connString: "postgres://localhost/ignored?dbname=other&sslmode=disable",
			want:       "postgres://localhost/t_db?dbname=t_db&sslmode=disable",
		},
		{
			name:       "URLWithUnixSocket",
			connString: "postgres:///postgres?host=/var/run/postgresql",
			want:       "postgres:///t_db?host=/var/run/postgresql",
		},
		{
			name:       "MultiHostURL",
			connString: "postgres://postgres@host1:5432,host2:5433/postgres?target_session_attrs=read-write",
			want:       "postgres://postgres@host1:5432,host2:5433/t_db?target_session_attrs=read-write",
		},
		{
			name:       "KeywordValue",
			connString: "host=127.0.0.1 port=5432 dbname=postgres user=postgres sslmode=disable",
			want:       "host=127.0.0.1 port=5432 dbname=postgres user=postgres sslmode=disable dbname='t_db'",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got, err := replaceDatabase(tt.connString, "t_db")
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestRandomName(t *testing.T) {
	t.Parallel()

	name := randomName()
	require.Regexp(t, `^t_[a-z0-9]{10}$`, name)
	require.NotEqual(t, name, randomName())
}

package benchkit

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// OpenPool opens a pool of at most maxConns connections to the
// PostgreSQL at url, named app (application_name), and checks within 30 s
// that the server answers.
func OpenPool(ctx context.Context, url string, maxConns int32, app string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = maxConns
	pc.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("PostgreSQL: %w (is the stack up? scripts/stack.sh up)", err)
	}
	return pool, nil
}

package doctor

import (
	"context"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/pgprovider"
)

// provider recognises the managed service the database runs on and
// reports it, so the user can see why the fixes below name a parameter
// group or a console instead of ALTER SYSTEM. It never fails: a server
// whose provider cannot be read gets the self-hosted fixes.
func provider(ctx context.Context, db DB, r *Report) pgprovider.Provider {
	p, err := pgprovider.Detect(ctx, db)
	switch {
	case err != nil:
		r.add("provider", Warn, "cannot tell: "+err.Error()+"; the fixes below are for self-hosted PostgreSQL", "")
	case p.Managed():
		r.add("provider", Pass, p.Name()+" (recognised by "+strings.Join(p.Signals, ", ")+"): the fixes below are for it", "")
	default:
		r.add("provider", Pass, "no managed service recognised: the fixes below are for self-hosted PostgreSQL", "")
	}
	return p
}

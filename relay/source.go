package relay

import (
	"context"
	"fmt"

	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// Source names what one relay streams: a PostgreSQL cluster (by its system
// identifier, which its physical standbys share, so the name survives a
// failover), a database in it, and a slot there. Kafka clusters are
// shared by many services, so every default name a relay gives Kafka
// carries its Source: the transactional id (Config.TransactionalID) and
// the key of its position records (PositionKey). Two services left on the
// default slot name then neither fence each other nor read each other's
// positions.
//
// A copy of a cluster made below PostgreSQL (a disk snapshot or a cloned
// volume started as a second primary) keeps the system identifier: its
// relay has the same Source as the original's. Give such a copy its own
// slot name, or its own --transactional-id and positions topic.
type Source struct {
	SystemID string
	Database string
	Slot     string
}

// PositionKey is the key of the Source's position records in the
// positions topic: "<system id>/<database>/<slot>".
func (s Source) PositionKey() string {
	return s.SystemID + "/" + s.Database + "/" + s.Slot
}

// legacyPositionKey is the key position records had before they carried
// the Source (the bare slot name). A start that finds no record under
// PositionKey takes this key's newest record of the same system, so an
// upgrade resumes where the previous version stopped.
func (s Source) legacyPositionKey() string { return s.Slot }

// source resolves the Source of a stream on the server id: the system
// identifier its replication connection reported (IDENTIFY_SYSTEM needs
// no privilege beyond REPLICATION) and the database's name.
func (r *Relay) source(ctx context.Context, id checkpoint.Identity) (Source, error) {
	var db string
	if err := r.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		return Source{}, fmt.Errorf("read current database: %w", err)
	}
	return Source{SystemID: id.SystemID, Database: db, Slot: r.cfg.Database.Slot}, nil
}

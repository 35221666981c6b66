package main

import (
	"context"
	"errors"
	"io"

	"github.com/outbox-relay/outbox-relay/doctor"
)

// cmdDoctor checks PostgreSQL's settings, the publication and the slot and
// prints pass/warn/fail findings with their fixes; a fail exits 1.
func cmdDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parse("doctor",
		"Checks wal_level, max_replication_slots, max_wal_senders, max_slot_wal_keep_size, wal_sender_timeout,\n"+
			"the publication (table set, publish = 'insert') and the slot (plugin, wal_status, lag), and prints\n"+
			"each finding with its fix. Exit code 1 when any check fails.",
		args, scopeDB, stderr)
	if err != nil {
		return err
	}
	rep := &doctor.Report{}
	pool, err := connectPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	doctor.CheckPostgres(ctx, pool, doctor.Target{
		Slot: cfg.Slot, Publication: cfg.Publication, Schema: cfg.table.Schema, Table: cfg.table.Name,
	}, rep)
	rep.Write(stdout)
	if rep.Failed() {
		return errors.New("some checks failed (see the fixes above)")
	}
	return nil
}

package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"reconcile"
)

// MatchMark says which completed pass last matched an account, and what
// its conclusions rest on besides the data (docs/design.md, "Incremental
// matching").
type MatchMark struct {
	RunID string
	// MatchedAt is the pass's clock: a row changed after it, or after
	// Window's end if that is earlier, less the clock skew, is the next
	// pass's to match again.
	MatchedAt time.Time
	// Window is the pass's subject.
	Window reconcile.Window
	// Digest names the options the conclusions rest on.
	Digest string
	// Obligations counts the account's obligations created before
	// MatchedAt, or Window's end if earlier, less the clock skew, as the
	// pass read the table (a mark of migration 00020's or later: the
	// ones before counted to MatchedAt).
	Obligations int64
}

// MatchSave is what a pass that matched what it read saves of it: its
// mark, and the links of the objects it matched.
type MatchSave struct {
	Mark MatchMark
	// LinkOf gives a matched object's link; ok is false for an object the
	// pass did not match, whose stored link stays.
	LinkOf func(id string) (link ObjectLink, ok bool)
	// Relinked are the links of the matched objects the save does not
	// hold in Seen (those read from the mirror).
	Relinked []ObjectLink
}

// ObjectLink is what a pass that matched an object keeps of it: the
// least obligation it links to ("": none), and the creation of the
// oldest obligation it names from before it (zero: none; matcher.Result's
// NamesFrom).
type ObjectLink struct {
	ObjectID, ObligationID string
	NamesFrom              time.Time
}

// saveMatch writes a matching pass's links of the objects it read from
// the mirror and its mark, or, for a save no pass matched (nil), drops
// the account's mark.
func saveMatch(ctx context.Context, tx pgx.Tx, account string, ms *MatchSave) error {
	if ms == nil {
		for _, table := range []string{"match_marks", "match_runs"} {
			if _, err := tx.Exec(ctx, `DELETE FROM reconcile.`+table+` WHERE account = $1`, account); err != nil {
				return fmt.Errorf("match mark: %w", err)
			}
		}
		return nil
	}
	if len(ms.Relinked) > 0 {
		ids, obls := make([]string, len(ms.Relinked)), make([]string, len(ms.Relinked))
		froms := make([]pgtype.Timestamptz, len(ms.Relinked))
		for i, l := range ms.Relinked {
			ids[i], obls[i] = l.ObjectID, l.ObligationID
			froms[i] = pgtype.Timestamptz{Time: l.NamesFrom, Valid: !l.NamesFrom.IsZero()}
		}
		_, err := tx.Exec(ctx, `UPDATE reconcile.provider_objects p SET linked_to = nullif(l.obligation, ''), names_from = l.names_from
			FROM unnest($2::text[], $3::text[], $4::timestamptz[]) AS l(id, obligation, names_from)
			WHERE p.account = $1 AND p.id = l.id
				AND (p.linked_to IS DISTINCT FROM nullif(l.obligation, '') OR p.names_from IS DISTINCT FROM l.names_from)`,
			account, ids, obls, froms)
		if err != nil {
			return fmt.Errorf("links: %w", err)
		}
	}
	m := ms.Mark
	if m.RunID == "" || m.Digest == "" || !m.Window.Valid() {
		return errors.New("match mark: incomplete")
	}
	_, err := tx.Exec(ctx, `INSERT INTO reconcile.match_marks (account, run_id, matched_at, window_from, window_to, digest, obligations)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (account) DO UPDATE SET run_id = EXCLUDED.run_id, matched_at = EXCLUDED.matched_at,
			window_from = EXCLUDED.window_from, window_to = EXCLUDED.window_to, digest = EXCLUDED.digest,
			obligations = EXCLUDED.obligations`,
		account, m.RunID, m.MatchedAt, m.Window.From, m.Window.To, m.Digest, m.Obligations)
	if err != nil {
		return fmt.Errorf("match mark: %w", err)
	}
	// The run's transitions are now the reconciler's own writes
	// (OwnWrites): the links they were made on are saved.
	_, err = tx.Exec(ctx, `INSERT INTO reconcile.match_runs (account, run_id, matched_at) VALUES ($1, $2, $3)
		ON CONFLICT (account, run_id) DO UPDATE SET matched_at = EXCLUDED.matched_at`, account, m.RunID, m.MatchedAt)
	if err == nil {
		_, err = tx.Exec(ctx, `DELETE FROM reconcile.match_runs WHERE account = $1 AND matched_at < $2`,
			account, m.MatchedAt.Add(-7*24*time.Hour))
	}
	if err != nil {
		return fmt.Errorf("match runs: %w", err)
	}
	return nil
}

// Mark returns the view's account's match mark; ok is false when no
// completed pass's matching stands (none yet, or a save since that no
// pass matched).
func (m *Mirror) Mark(ctx context.Context) (mark MatchMark, ok bool, err error) {
	err = m.pool.QueryRow(ctx, `SELECT run_id, matched_at, window_from, window_to, digest, obligations FROM reconcile.match_marks
		WHERE account = $1`, m.account).Scan(&mark.RunID, &mark.MatchedAt, &mark.Window.From, &mark.Window.To, &mark.Digest,
		&mark.Obligations)
	if errors.Is(err, pgx.ErrNoRows) {
		return MatchMark{}, false, nil
	}
	if err != nil {
		return MatchMark{}, false, fmt.Errorf("read the match mark: %w", err)
	}
	mark.MatchedAt, mark.Window.From, mark.Window.To = mark.MatchedAt.UTC(), mark.Window.From.UTC(), mark.Window.To.UTC()
	return mark, true, nil
}

// Open returns what the view's account's open findings are about, and
// those of the findings resolved after resolvedAfter: their obligations
// and their provider objects, each once, in no order. A pass given its
// mark's clock learns what the passes after the mark resolved, whose
// mirror saves failed: their links, on which they resolved it, no mirror
// holds (docs/design.md, "Incremental matching").
func (m *Mirror) Open(ctx context.Context, resolvedAfter time.Time) (obligations, objects []string, err error) {
	rows, err := m.pool.Query(ctx, `SELECT DISTINCT coalesce(obligation_id, ''), unnest(CASE WHEN provider_ids = '{}' THEN '{""}'::text[]
		ELSE provider_ids END) FROM reconcile.findings
		WHERE account = $1 AND (status = 'open' OR status = 'resolved' AND resolved_at > $2)`, m.account, resolvedAfter)
	if err != nil {
		return nil, nil, fmt.Errorf("read open findings: %w", err)
	}
	defer rows.Close()
	seenObl, seenObj := map[string]bool{}, map[string]bool{}
	for rows.Next() {
		var obl, obj string
		if err := rows.Scan(&obl, &obj); err != nil {
			return nil, nil, fmt.Errorf("read open findings: %w", err)
		}
		if obl != "" && !seenObl[obl] {
			seenObl[obl] = true
			obligations = append(obligations, obl)
		}
		if obj != "" && !seenObj[obj] {
			seenObj[obj] = true
			objects = append(objects, obj)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read open findings: %w", err)
	}
	return obligations, objects, nil
}

// OwnWrites returns the obligations that passes whose matching the
// view's account's mirror holds (match_runs) transitioned at or after
// since, each with the last time one wrote into the row's updated_at
// (its pass's clock): the reconciler's own change, made on a link that
// was saved, not another's. A pass whose mirror save failed wrote rows
// whose links no mirror holds: its transitions are not counted
// (docs/design.md, "Incremental matching").
func (m *Mirror) OwnWrites(ctx context.Context, since time.Time) (map[string]time.Time, error) {
	rows, err := m.pool.Query(ctx, `SELECT obligation_id, max(at) FROM reconcile.transitions
		WHERE at >= $1 AND run_id IN (SELECT run_id FROM reconcile.match_runs WHERE account = $2) GROUP BY 1`, since, m.account)
	if err != nil {
		return nil, fmt.Errorf("read the reconciler's transitions: %w", err)
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var id string
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			return nil, fmt.Errorf("read the reconciler's transitions: %w", err)
		}
		out[id] = at.UTC()
	}
	return out, rows.Err()
}

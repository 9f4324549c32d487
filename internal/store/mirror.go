package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
	"reconcile/internal/redact"
)

// Mirror is the reconciler's copy of the provider's records, for
// incremental sync: the objects read, the idempotency keys that events
// told, and cursors saying over which times the copy is complete
// (migration 00002). It is never the source of truth, only a record of
// what the provider showed and when; a pass decides what it may take from
// it and what it must read again.
//
// A Mirror is one Stripe account's view of it: Stripe's ids are unique
// only within an account, and each account's copy is complete over its
// own times (migration 00009), so every read and save is of the view's
// account alone.
type Mirror struct {
	pool *pgxpool.Pool
	// account is the view's Stripe account: empty for the platform's own
	// (see reconcile.ProviderObject.Account).
	account string
}

// NewMirror returns the platform's view of the mirror kept in pool's
// database (schema reconcile): what a reconciler reading only the
// platform's account always kept.
func NewMirror(pool *pgxpool.Pool) *Mirror {
	return &Mirror{pool: pool}
}

// ForAccount returns the view of the same mirror for one Stripe account:
// empty for the platform's own, else a connected account's id (acct_…).
// Its reads return that account's objects and keys only, each carrying
// the account, and its Save writes to that account only, so that two
// accounts' objects of one id are kept apart (docs/design.md, "Reading
// the provider").
func (m *Mirror) ForAccount(account string) *Mirror {
	return &Mirror{pool: m.pool, account: account}
}

// The cursor names of the sync_cursors table besides the object kinds.
const (
	cursorKeys    = "keys"
	cursorChanges = "changes"
)

// SyncCursors say what the mirror is complete for; a zero window where
// nothing is known.
type SyncCursors struct {
	// Objects: every object of the kind created in the window is mirrored.
	Objects map[reconcile.ObjectKind]reconcile.Window
	// Keys: every key told by an event created in the window is mirrored.
	Keys reconcile.Window
	// Changes: the change feed ran without a gap from Changes.From to
	// Changes.To, so an object seen at or after Changes.From is as the
	// provider showed it at Changes.To (bar changes Stripe tells no event
	// of: a payment intent's metadata).
	Changes reconcile.Window
	// RunID is the run that last moved a cursor.
	RunID string
}

// MirrorObject is a mirrored object and when the provider last showed it
// so.
type MirrorObject struct {
	Object reconcile.ProviderObject
	SeenAt time.Time
}

// SeenObjects are provider objects as the provider showed them at At.
type SeenObjects struct {
	At      time.Time
	Objects []reconcile.ProviderObject
}

// MirrorUpdate is what one completed pass adds to the mirror.
type MirrorUpdate struct {
	RunID string
	Now   time.Time
	// Seen are upserted, each object unless the mirror holds it seen
	// later; of two states of one object here, the later seen wins.
	Seen []SeenObjects
	// Keys are added, each object and key once (as a listing holds them);
	// of two events telling one object's key, across saves, the earliest
	// is kept.
	Keys []reconcile.KeyEvidence
	// Absent are the ids the pass retrieved and the provider answered it
	// has no such object for (404), as of Now (Absent reads them back).
	Absent []string
	// Cursors are set where their window is valid (non-empty for objects,
	// From ≤ To for keys and changes with a non-zero To) and left as they
	// are otherwise.
	Cursors SyncCursors
	// LinkKeys are the metadata keys linking reads (the matcher's
	// MetadataObligationID and MetadataIdempotencyKey). Their values are
	// stored exact; every other metadata key and value is stored masked
	// (redact.Metadata), so that no card number or e-mail address the
	// provider holds is kept readable at rest (docs/design.md, "Untrusted
	// text"). Objects read back carry the masked metadata.
	LinkKeys []string
	// Match, when set, says the pass matched what it read and records how
	// (docs/design.md, "Incremental matching"). A save without it (a
	// fetch job's) drops the account's match mark: what it saved no pass
	// matched, so the next pass matches the account whole.
	Match *MatchSave
	// Then, when set, runs last in the save's transaction: a fetch job of
	// a pass run as jobs completes itself there (docs/design.md, "Passes
	// as jobs").
	Then func(ctx context.Context, tx pgx.Tx) error
}

// Cursors reads what the view's account's mirror is complete for.
func (m *Mirror) Cursors(ctx context.Context) (SyncCursors, error) {
	rows, err := m.pool.Query(ctx, `SELECT name, complete_from, complete_to, run_id FROM reconcile.sync_cursors
		WHERE account = $1 ORDER BY updated_at, name`, m.account)
	if err != nil {
		return SyncCursors{}, fmt.Errorf("read sync cursors: %w", err)
	}
	c := SyncCursors{Objects: map[reconcile.ObjectKind]reconcile.Window{}}
	var (
		name     string
		from, to time.Time
		runID    string
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &from, &to, &runID}, func() error {
		w := reconcile.Window{From: from.UTC(), To: to.UTC()}
		switch name {
		case cursorKeys:
			c.Keys = w
		case cursorChanges:
			c.Changes = w
		default:
			c.Objects[reconcile.ObjectKind(name)] = w
		}
		c.RunID = runID
		return nil
	})
	if err != nil {
		return SyncCursors{}, fmt.Errorf("read sync cursors: %w", err)
	}
	return c, nil
}

// ceilSecond is the first whole second at or after t: Stripe's created
// times are whole seconds, and a window [From, To) holds the objects
// created in seconds [ceil(From), ceil(To)), as the Stripe reader lists
// them.
func ceilSecond(t time.Time) time.Time {
	if c := t.Truncate(time.Second); c.Before(t) {
		return c.Add(time.Second)
	}
	return t
}

const mirrorObjectColumns = `id, kind, amount, currency, status, raw_status, amount_refunded, target,
	payment_intent, charge, customer, metadata, created, seen_at`

// Objects returns the mirrored objects created in w (in whole seconds, as
// a listing of w holds them) and seen at or after since, in no particular
// order (the matcher's results do not depend on it). The slice has room
// for a few percent more, so that a pass appends what it listed fresh
// without copying a million objects.
func (m *Mirror) Objects(ctx context.Context, w reconcile.Window, since time.Time) ([]reconcile.ProviderObject, error) {
	if !w.Valid() {
		return nil, nil
	}
	rows, err := m.pool.Query(ctx, `SELECT `+mirrorObjectColumns+` FROM reconcile.provider_objects
		WHERE account = $4 AND created >= $1 AND created < $2 AND seen_at >= $3`,
		ceilSecond(w.From), ceilSecond(w.To), since, m.account)
	if err != nil {
		return nil, fmt.Errorf("read mirrored objects: %w", err)
	}
	var c chunks[reconcile.ProviderObject]
	err = scanMirrorObjects(rows, m.account, func(o reconcile.ProviderObject, _ time.Time) { c.add(o) })
	if err != nil {
		return nil, fmt.Errorf("read mirrored objects: %w", err)
	}
	return c.slice(), nil
}

// chunks collects a result of unknown length in blocks, then copies it
// once into a slice of the right size: append's doublings would copy a
// million 200-byte objects twenty times and leave the copies as garbage.
type chunks[T any] struct {
	full [][]T
	cur  []T
	n    int
}

func (c *chunks[T]) add(v T) {
	if len(c.cur) == cap(c.cur) {
		if c.cur != nil {
			c.full = append(c.full, c.cur)
		}
		c.cur = make([]T, 0, min(max(64, 2*cap(c.cur)), 8192))
	}
	c.cur = append(c.cur, v)
	c.n++
}

// slice returns everything added, with room for a few percent more.
func (c *chunks[T]) slice() []T {
	if c.n == 0 {
		return nil
	}
	out := make([]T, 0, c.n+c.n/32+1024)
	for _, f := range c.full {
		out = append(out, f...)
	}
	return append(out, c.cur...)
}

// Get returns the mirrored objects of ids seen at or after since, sorted
// by id; the others are not returned.
func (m *Mirror) Get(ctx context.Context, ids []string, since time.Time) ([]MirrorObject, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := m.pool.Query(ctx, `SELECT `+mirrorObjectColumns+` FROM reconcile.provider_objects
		WHERE account = $3 AND id = ANY($1::text[]) AND seen_at >= $2`, ids, since, m.account)
	if err != nil {
		return nil, fmt.Errorf("read mirrored objects by id: %w", err)
	}
	var out []MirrorObject
	err = scanMirrorObjects(rows, m.account, func(o reconcile.ProviderObject, seen time.Time) {
		out = append(out, MirrorObject{Object: o, SeenAt: seen})
	})
	if err != nil {
		return nil, fmt.Errorf("read mirrored objects by id: %w", err)
	}
	slices.SortFunc(out, func(a, b MirrorObject) int { return cmp.Compare(a.Object.ID, b.Object.ID) })
	return out, nil
}

// scanMirrorObjects reads the objects of one account's rows: the columns
// of mirrorObjectColumns, then one per extra scan target, which each may
// read.
func scanMirrorObjects(rows pgx.Rows, account string, each func(reconcile.ProviderObject, time.Time), extra ...any) error {
	defer rows.Close()
	// Kinds, currencies and statuses take a handful of values: one string
	// each rather than one per row.
	var (
		id, target, pi, charge, customer mirrorText
		kind, currency, status, raw      = newInterned(), newInterned(), newInterned(), newInterned()
		amount, refunded                 int64
		metadata                         []byte
		created, seen                    time.Time
	)
	targets := append([]any{&id, &kind, &amount, &currency, &status, &raw, &refunded, &target, &pi, &charge, &customer,
		&metadata, &created, &seen}, extra...)
	for rows.Next() {
		if err := rows.Scan(targets...); err != nil {
			return fmt.Errorf("object %q: %w", id.s, err)
		}
		o := reconcile.ProviderObject{
			ID: id.s, Account: account, Kind: reconcile.ObjectKind(kind.s), Money: reconcile.Money{Amount: amount, Currency: currency.s},
			Status: reconcile.Status(status.s), RawStatus: raw.s, AmountRefunded: refunded,
			Target: target.s, PaymentIntent: pi.s, Charge: charge.s, Customer: customer.s, Created: reconcile.StampOf(created.UTC()),
		}
		if len(metadata) > 0 {
			if err := json.Unmarshal(metadata, &o.Metadata); err != nil {
				return fmt.Errorf("object %q: metadata: %w", id.s, err)
			}
		}
		each(o, seen.UTC())
	}
	return rows.Err()
}

// Keys returns the key evidence of the view's account told by the events
// created in w (whole seconds), in no particular order, with room for a
// few percent more.
func (m *Mirror) Keys(ctx context.Context, w reconcile.Window) ([]reconcile.KeyEvidence, error) {
	if !w.Valid() {
		return nil, nil
	}
	rows, err := m.pool.Query(ctx, `SELECT `+mirrorKeyColumns+`
		FROM reconcile.provider_keys WHERE account = $3 AND created >= $1 AND created < $2`,
		ceilSecond(w.From), ceilSecond(w.To), m.account)
	if err != nil {
		return nil, fmt.Errorf("read mirrored keys: %w", err)
	}
	keys, err := scanMirrorKeys(rows, m.account)
	if err != nil {
		return nil, fmt.Errorf("read mirrored keys: %w", err)
	}
	return keys, nil
}

// KeysOf returns the key evidence of the view's account about the objects
// ids told by the events created in w (whole seconds, as Keys reads w),
// in no particular order: what a shard's closure needs of the keys
// (docs/design.md, "Passes as jobs"), looked up by provider_keys'
// primary key rather than read whole.
func (m *Mirror) KeysOf(ctx context.Context, ids []string, w reconcile.Window) ([]reconcile.KeyEvidence, error) {
	if len(ids) == 0 || !w.Valid() {
		return nil, nil
	}
	var keys []reconcile.KeyEvidence
	err := pgx.BeginTxFunc(ctx, m.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := lookup(ctx, tx, len(ids)); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+mirrorKeyColumns+`
			FROM reconcile.provider_keys WHERE account = $3 AND object_id = ANY($4::text[]) AND created >= $1 AND created < $2`,
			ceilSecond(w.From), ceilSecond(w.To), m.account, ids)
		if err != nil {
			return err
		}
		keys, err = scanMirrorKeys(rows, m.account)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read mirrored keys by object: %w", err)
	}
	return keys, nil
}

// lookupMost is the most ids a statement looks up one by one in an index
// (lookup); more are joined as the planner sees fit.
const lookupMost = 100_000

// lookup tells the planner, for the rest of tx, that its next statement
// looks n ids up by index: under lookupMost, no sequential scan and no
// JIT. At a million mirrored keys the planner took eleven thousand object
// ids for enough to scan the whole table (0.3 s, against under 0.1 s by
// the index), and compiled the scan first.
func lookup(ctx context.Context, tx pgx.Tx, n int) error {
	if n > lookupMost {
		return nil
	}
	_, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off; SET LOCAL jit = off")
	return err
}

// Naming is what Named asks of the mirror: whether the records of a
// listing name an obligation (docs/design.md, "Coverage": a pass reads
// the obligations its records name).
type Naming struct {
	// IDs are provider and target ids, named by an object of that id;
	// Keys idempotency keys, named by key evidence; MetaIDs and MetaKeys
	// obligation ids and keys, named by an object's metadata under
	// MetaIDKey and MetaKeyKey.
	IDs, Keys, MetaIDs, MetaKeys []string
	MetaIDKey, MetaKeyKey        string
	// Held are objects whose mirrored copy is not asked: the asker holds
	// them as they are now, and their metadata may have changed since
	// the mirror saved it.
	Held []string
}

// Named returns which of n's names the view's account's records name:
// objects created in w (whole seconds) and seen at or after since, key
// evidence told in kw. Ids, keys and metadata values come back in one
// set, each prefixed by its kind ("id:", "key:", "meta_id:", "meta_key:").
// Each name is looked up by index, the metadata by containment in the
// GIN index (migration 00014), so that a nightly pass asking of a few
// obligations reads a few rows, not the coverage.
func (m *Mirror) Named(ctx context.Context, w, kw reconcile.Window, since time.Time, n Naming) (map[string]bool, error) {
	out := map[string]bool{}
	if !w.Valid() {
		return out, nil
	}
	var kinds, values, docs []string
	for _, meta := range []struct {
		kind, key string
		values    []string
	}{{"meta_id:", n.MetaIDKey, n.MetaIDs}, {"meta_key:", n.MetaKeyKey, n.MetaKeys}} {
		if meta.key == "" {
			continue
		}
		for _, v := range meta.values {
			doc, err := json.Marshal(map[string]string{meta.key: v})
			if err != nil {
				return nil, err
			}
			kinds, values, docs = append(kinds, meta.kind), append(values, v), append(docs, string(doc))
		}
	}
	rows, err := m.pool.Query(ctx, namedSQL, m.account, ceilSecond(w.From), ceilSecond(w.To), orEmpty(n.IDs), since,
		orEmpty(n.Keys), ceilSecond(kw.From), ceilSecond(kw.To), orEmpty(kinds), orEmpty(values), orEmpty(docs), orEmpty(n.Held))
	if err != nil {
		return nil, fmt.Errorf("read what the mirror names: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read what the mirror names: %w", err)
	}
	for _, v := range names {
		out[v] = true
	}
	return out, nil
}

// NamesBefore returns the view's account's objects created in w (whole
// seconds) and seen at or after since that name an obligation created
// before before, as the pass that last matched each kept it (ObjectLink's
// NamesFrom; its ObligationID is not read), in no order. The few objects
// that name one at all are indexed apart (migration 00018).
func (m *Mirror) NamesBefore(ctx context.Context, w reconcile.Window, before, since time.Time) ([]ObjectLink, error) {
	if !w.Valid() {
		return nil, nil
	}
	rows, err := m.pool.Query(ctx, namesBeforeSQL, m.account, before, ceilSecond(w.From), ceilSecond(w.To), since)
	if err != nil {
		return nil, fmt.Errorf("read what the mirror names from before %s: %w", before.Format(time.RFC3339), err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ObjectLink, error) {
		var l ObjectLink
		err := row.Scan(&l.ObjectID, &l.NamesFrom)
		l.NamesFrom = l.NamesFrom.UTC()
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("read what the mirror names from before %s: %w", before.Format(time.RFC3339), err)
	}
	return out, nil
}

// namesBeforeSQL is NamesBefore's statement.
const namesBeforeSQL = `SELECT id, names_from FROM reconcile.provider_objects
	WHERE account = $1 AND names_from IS NOT NULL AND names_from < $2 AND created >= $3 AND created < $4 AND seen_at >= $5`

// namedSQL is Named's statement.
const namedSQL = `
	SELECT 'id:' || id FROM reconcile.provider_objects
		WHERE account = $1 AND id = ANY($4::text[]) AND created >= $2 AND created < $3 AND seen_at >= $5
			AND id <> ALL($12::text[])
	UNION
	SELECT 'key:' || key FROM reconcile.provider_keys
		WHERE account = $1 AND key = ANY($6::text[]) AND created >= $7 AND created < $8
	UNION
	SELECT m.kind || m.value FROM unnest($9::text[], $10::text[], $11::jsonb[]) AS m(kind, value, doc)
		WHERE EXISTS (SELECT 1 FROM reconcile.provider_objects o WHERE o.metadata @> m.doc AND o.metadata IS NOT NULL
			AND o.account = $1 AND o.created >= $2 AND o.created < $3 AND o.seen_at >= $5 AND o.id <> ALL($12::text[]))`

const mirrorKeyColumns = `object_id, key, object_kind, event_id, event_type, created, coalesce(request_id, '')`

// scanMirrorKeys reads the key evidence of one account's rows (of
// mirrorKeyColumns), with room for a few percent more.
func scanMirrorKeys(rows pgx.Rows, account string) ([]reconcile.KeyEvidence, error) {
	defer rows.Close()
	var (
		objectID, key, eventID, requestID mirrorText
		kind, eventType                   = newInterned(), newInterned()
		created                           time.Time
	)
	var keys chunks[reconcile.KeyEvidence]
	for rows.Next() {
		if err := rows.Scan(&objectID, &key, &kind, &eventID, &eventType, &created, &requestID); err != nil {
			return nil, err
		}
		keys.add(reconcile.KeyEvidence{Account: account, ObjectID: objectID.s, ObjectKind: reconcile.ObjectKind(kind.s),
			Key: key.s, EventID: eventID.s, EventType: eventType.s, RequestID: requestID.s, Created: reconcile.StampOf(created.UTC())})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return keys.slice(), nil
}

// Related names what a shard's closure asks of the mirror (docs/design.md,
// "Passes as jobs"): each term a set of objects, Mirror.Related returns
// their union.
type Related struct {
	// IDs: the objects of these ids.
	IDs []string
	// Intents: the objects whose payment intent is one of these (an
	// intent's charges, the refunds of it).
	Intents []string
	// Charges: the objects whose charge or target is one of these (a
	// charge's refunds, an intent naming it as its latest charge).
	Charges []string
	// Twins: the objects whose (customer, amount) is one of these pairs,
	// created in its [From, To]; and the charges with no customer, created
	// then, whose payment intent, in the mirror and seen at or after
	// Related's since, has that customer and the charge that amount.
	Twins []CustomerAmount
	// Keys: the objects whose key evidence (any event's) tells one of
	// these idempotency keys.
	Keys []string
	// LinkedTo: the objects the last matching pass found linked to one
	// of these obligations (provider_objects.linked_to, the least one).
	LinkedTo []string
	// Metadata: the objects whose metadata holds one of these key–value
	// pairs (an obligation's id or key under a linking metadata key).
	Metadata []MetadataPair
	// Pending: every object still pending; UnlinkedIntents: every payment
	// intent the last matching pass found linked to nothing (or that no
	// pass matched).
	Pending, UnlinkedIntents bool
	// Held, when set, says which objects the asker holds already: their
	// ids are matched, but they are not read again.
	Held func(id string) bool
	// Linked, when set, is told of every object read what the last
	// matching pass kept of it (nothing when no pass matched it), so that
	// a pass that finds the same need not write it again
	// (MatchSave.Relinked).
	Linked func(stored ObjectLink)
}

// MetadataPair is one metadata key and value.
type MetadataPair struct{ Key, Value string }

// CustomerAmount is a customer and an amount in minor units, over the
// creation times [From, To] (what a suspected duplicate's twins share:
// docs/design.md, "Findings").
type CustomerAmount struct {
	Customer string
	Amount   int64
	From, To time.Time
}

// empty reports whether q asks for nothing.
func (q Related) empty() bool {
	return len(q.IDs)+len(q.Intents)+len(q.Charges)+len(q.Twins)+len(q.Keys)+len(q.LinkedTo)+len(q.Metadata) == 0 &&
		!q.Pending && !q.UnlinkedIntents // Held asks nothing
}

// relatedSQL finds the ids of the objects a Related asks for, each term
// by an index of migration 00013 (or the primary key), and reads them
// once each. The mirror stores an absent intent, charge, target or
// customer as NULL (saveObjects), as the indexes' predicates say: an
// empty id or customer asked for matches nothing. $1 account, $2 created
// from, $3 created to, $4 seen since, $5 ids, $6 intents, $7 charges, $8
// customers, $9 amounts, $10 and $11 the pairs' creation bounds, $12 keys,
// $13 linked-to obligations, $14 metadata documents, $15 pending, $16
// unlinked intents (migration 00014's indexes). A false boolean is a
// constant under the custom plan Related forces: its term reads nothing.
const relatedSQL = `SELECT ` + mirrorObjectColumns + `, linked_to, names_from` + relatedFrom

// relatedIDsSQL is the ids relatedSQL's terms name, before its window
// and seen_at are looked at: the terms are index lookups whose sizes the
// planner cannot tell (a metadata containment is guessed at hundreds of
// rows a document), and joined with the window it may walk the whole
// mirror by its primary key (21 s at a million objects) for ten thousand
// ids. The window is applied where the objects are read.
const relatedIDsSQL = `SELECT id FROM (` + relatedTerms + `) AS terms(id)`

const relatedFrom = ` FROM reconcile.provider_objects
	WHERE account = $1 AND created >= $2 AND created < $3 AND seen_at >= $4 AND id IN (` + relatedTerms + `)`

const relatedTerms = `
		SELECT id FROM reconcile.provider_objects WHERE account = $1 AND id = ANY($5::text[])
		UNION
		SELECT id FROM reconcile.provider_objects WHERE account = $1 AND payment_intent = ANY($6::text[])
			AND payment_intent IS NOT NULL
		UNION
		SELECT id FROM reconcile.provider_objects WHERE account = $1 AND charge = ANY($7::text[]) AND charge IS NOT NULL
		UNION
		SELECT id FROM reconcile.provider_objects WHERE account = $1 AND target = ANY($7::text[]) AND target IS NOT NULL
		UNION
		SELECT o.id FROM unnest($8::text[], $9::bigint[], $10::timestamptz[], $11::timestamptz[]) AS t(customer, amount, lo, hi)
			JOIN reconcile.provider_objects o ON o.account = $1 AND o.customer = t.customer AND o.amount = t.amount
				AND o.customer IS NOT NULL AND o.created >= t.lo AND o.created <= t.hi
		UNION
		SELECT c.id FROM unnest($8::text[], $9::bigint[], $10::timestamptz[], $11::timestamptz[]) AS t(customer, amount, lo, hi)
			JOIN reconcile.provider_objects pi ON pi.account = $1 AND pi.customer = t.customer AND pi.customer IS NOT NULL
				AND pi.kind = 'payment_intent' AND pi.seen_at >= $4
			JOIN reconcile.provider_objects c ON c.account = $1 AND c.payment_intent = pi.id AND c.payment_intent IS NOT NULL
				AND c.kind = 'charge' AND c.customer IS NULL AND c.amount = t.amount AND c.created >= t.lo AND c.created <= t.hi
		UNION
		SELECT object_id FROM reconcile.provider_keys WHERE account = $1 AND key = ANY($12::text[])
		UNION
		SELECT id FROM reconcile.provider_objects WHERE account = $1 AND linked_to = ANY($13::text[]) AND linked_to IS NOT NULL
		UNION
		SELECT o.id FROM unnest($14::jsonb[]) AS m(doc)
			JOIN reconcile.provider_objects o ON o.metadata @> m.doc AND o.metadata IS NOT NULL AND o.account = $1
		UNION
		SELECT id FROM reconcile.provider_objects WHERE $15::boolean AND account = $1 AND status = 'pending'
			AND created >= $2 AND created < $3
		UNION
		SELECT id FROM reconcile.provider_objects WHERE $16::boolean AND account = $1 AND kind = 'payment_intent'
			AND linked_to IS NULL AND created >= $2 AND created < $3`

// Related returns, in no particular order and each once, the view's
// account's mirrored objects created in w (whole seconds, as Objects
// reads w) and seen at or after since that match any term of q: what one
// shard's closure needs of the mirror, looked up by index rather than by
// reading the account's whole copy (docs/design.md, "Passes as jobs").
func (m *Mirror) Related(ctx context.Context, w reconcile.Window, q Related, since time.Time) ([]reconcile.ProviderObject, error) {
	if q.empty() || !w.Valid() {
		return nil, nil
	}
	customers, amounts := make([]string, len(q.Twins)), make([]int64, len(q.Twins))
	los, his := make([]time.Time, len(q.Twins)), make([]time.Time, len(q.Twins))
	for i, t := range q.Twins {
		customers[i], amounts[i], los[i], his[i] = t.Customer, t.Amount, t.From, t.To
	}
	var out []reconcile.ProviderObject
	var linked pgtype.Text
	var from pgtype.Timestamptz
	each := func(o reconcile.ProviderObject, _ time.Time) {
		out = append(out, o)
		if q.Linked != nil {
			l := ObjectLink{ObjectID: o.ID, ObligationID: linked.String}
			if from.Valid {
				l.NamesFrom = from.Time.UTC()
			}
			q.Linked(l)
		}
	}
	err := pgx.BeginTxFunc(ctx, m.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		// A shard's closure runs this statement round after round: after
		// five, PostgreSQL may plan it once for any arrays (a generic
		// plan), and that plan hashes the whole mirror for every round
		// (minutes at 100k objects instead of tenths of a second).
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_custom_plan"); err != nil {
			return err
		}
		// Every term is an index lookup. The planner takes an array of
		// metadata documents joined by containment for ten rows, and scans
		// every object with metadata once per document instead of asking
		// the GIN index (78 s at a million objects for 18,000 documents,
		// against 0.03 s by the index).
		if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
			return err
		}
		// The same guess (millions of rows) passes JIT's thresholds, and
		// compiling the statement took longer than running it (most of
		// 1.3 s at a million objects).
		if _, err := tx.Exec(ctx, "SET LOCAL jit = off"); err != nil {
			return err
		}
		// Its lookups read index pages a cache holds. At the default
		// random_page_cost (4, a spinning disk's) the planner took reading
		// the account's 150,000 entries of an index for cheaper than 2,000
		// descents into it, one per id named: the statement took 160 ms
		// a round at a million objects, 100 ms at 1.1 (an SSD's, or a
		// cache's).
		if _, err := tx.Exec(ctx, "SET LOCAL random_page_cost = 1.1"); err != nil {
			return err
		}
		// Non-nil slices: pgx sends a nil one as NULL, which matches
		// nothing either, but an empty array says what is meant.
		docs := make([]string, len(q.Metadata))
		for i, p := range q.Metadata {
			b, err := json.Marshal(map[string]string{p.Key: p.Value})
			if err != nil {
				return err
			}
			docs[i] = string(b)
		}
		args := []any{m.account, ceilSecond(w.From), ceilSecond(w.To), since,
			orEmpty(q.IDs), orEmpty(q.Intents), orEmpty(q.Charges), customers, amounts, los, his, orEmpty(q.Keys),
			orEmpty(q.LinkedTo), docs, q.Pending, q.UnlinkedIntents}
		if q.Held != nil {
			// The ids first, and only those not held read whole: a
			// shard's closure matches mostly what it holds, and decoding
			// it all again would cost as much memory as holding it.
			rows, err := tx.Query(ctx, relatedIDsSQL, args...)
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			ids = slices.DeleteFunc(ids, q.Held)
			if len(ids) == 0 {
				return nil
			}
			rows, err = tx.Query(ctx, `SELECT `+mirrorObjectColumns+`, linked_to, names_from FROM reconcile.provider_objects
				WHERE account = $1 AND id = ANY($2::text[]) AND created >= $3 AND created < $4 AND seen_at >= $5`,
				m.account, ids, args[1], args[2], since)
			if err != nil {
				return err
			}
			return scanMirrorObjects(rows, m.account, each, &linked, &from)
		}
		rows, err := tx.Query(ctx, relatedSQL, args...)
		if err != nil {
			return err
		}
		return scanMirrorObjects(rows, m.account, each, &linked, &from)
	})
	if err != nil {
		return nil, fmt.Errorf("read related mirrored objects: %w", err)
	}
	return out, nil
}

// Halves returns, in no particular order and each once, the ids of the
// other half of the payments ids name, as the view's account's mirror
// knows them whatever their creation or the time it saw them: a charge's
// payment intent, an intent's charges. A refund names its payment by
// either half; its twins (docs/design.md, "Findings") may name the other,
// and which half goes with which never changes once the provider made it.
// What is returned is ids alone: the objects they name are the pass's
// input only where it reads them.
func (m *Mirror) Halves(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var halves []string
	err := pgx.BeginTxFunc(ctx, m.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		// Each term is an index lookup (migration 00013, the primary
		// key), as Related's are, and for the same reasons the planner
		// is kept from scanning the mirror and from compiling.
		if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SET LOCAL jit = off"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT payment_intent FROM reconcile.provider_objects
			WHERE account = $1 AND id = ANY($2::text[]) AND kind = 'charge' AND payment_intent IS NOT NULL
		UNION
		SELECT charge FROM reconcile.provider_objects
			WHERE account = $1 AND id = ANY($2::text[]) AND kind = 'payment_intent' AND charge IS NOT NULL
		UNION
		SELECT id FROM reconcile.provider_objects
			WHERE account = $1 AND payment_intent = ANY($2::text[]) AND payment_intent IS NOT NULL AND kind = 'charge'
		UNION
		SELECT id FROM reconcile.provider_objects
			WHERE account = $1 AND charge = ANY($2::text[]) AND charge IS NOT NULL AND kind = 'payment_intent'`, m.account, ids)
		if err != nil {
			return err
		}
		halves, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the mirror's payments: %w", err)
	}
	return halves, nil
}

// Save writes one completed pass's reads of the view's account and moves
// that account's cursors, in one transaction: either all of it is saved
// or none. Objects and keys carry the view's account or none (then they
// are the view's); one of another account is refused, rather than filed
// under the wrong one. Metadata is saved
// masked but for the values of u.LinkKeys. Given a run lock with
// WithFence, the transaction proves the lock is still the run's, and
// fails with an error wrapping ErrLockLost otherwise: the saves of two
// runs never interleave.
func (m *Mirror) Save(ctx context.Context, u MirrorUpdate) error {
	if u.RunID == "" {
		return errors.New("save mirror: no run id")
	}
	if err := m.ownsAll(u); err != nil {
		return fmt.Errorf("save mirror: %w", err)
	}
	err := inFence(ctx, m.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		// A first pass joins a million rows: in memory, not on disk.
		if _, err := tx.Exec(ctx, `SET LOCAL work_mem = '64MB'`); err != nil {
			return err
		}
		// One save of an account at a time: the fetch jobs of a pass run
		// as jobs save side by side, without the run lock, and their
		// slices' events overlap, so two may carry the same key; the
		// update-then-insert below is right only for one saver
		// (docs/design.md, "Passes as jobs").
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, mirrorSaveLockClass, m.account); err != nil {
			return err
		}
		var linkOf func(string) (ObjectLink, bool)
		if u.Match != nil {
			linkOf = u.Match.LinkOf
		}
		if err := saveObjects(ctx, tx, m.account, u.Seen, u.LinkKeys, linkOf); err != nil {
			return err
		}
		if err := saveKeys(ctx, tx, m.account, u.Keys); err != nil {
			return err
		}
		if err := saveAbsent(ctx, tx, m.account, u.Absent, u.Now); err != nil {
			return err
		}
		if err := saveCursors(ctx, tx, m.account, u); err != nil {
			return err
		}
		if err := saveMatch(ctx, tx, m.account, u.Match); err != nil {
			return err
		}
		if u.Then != nil {
			return u.Then(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("save mirror: %w", err)
	}
	if n := seenCount(u.Seen); n >= analyzeAfter {
		// A first pass loads a million rows at once, and the next pass's
		// indexed lookups (Related) are planned by statistics that
		// autovacuum may not have gathered yet (on a table it still takes
		// for empty, PostgreSQL scans it for every metadata document
		// instead of asking the index), and read through a visibility
		// map no vacuum has set (every index-only lookup visits the
		// heap). Best effort: without the privilege, PostgreSQL warns and
		// skips, and the save stands.
		_, _ = m.pool.Exec(ctx, `VACUUM (ANALYZE) reconcile.provider_objects, reconcile.provider_keys`)
	}
	return nil
}

// analyzeAfter is how many objects a save holds before it refreshes the
// mirror's statistics.
const analyzeAfter = 50_000

func seenCount(seen []SeenObjects) int {
	n := 0
	for _, g := range seen {
		n += len(g.Objects)
	}
	return n
}

// mirrorSaveLockClass is the first key of the advisory lock that
// serialises one account's mirror saves (the second: the account's hash).
const mirrorSaveLockClass int32 = 0x6d697272 // "mirr"

// ownsAll refuses an update holding an object or a key of an account
// other than the view's.
func (m *Mirror) ownsAll(u MirrorUpdate) error {
	for _, g := range u.Seen {
		for _, o := range g.Objects {
			if o.Account != "" && o.Account != m.account {
				return fmt.Errorf("object %s of account %s in a save of %s", o.ID, o.Account, reconcile.Account{ID: m.account}.Label())
			}
		}
	}
	for _, k := range u.Keys {
		if k.Account != "" && k.Account != m.account {
			return fmt.Errorf("key evidence of object %s of account %s in a save of %s", k.ObjectID, k.Account, reconcile.Account{ID: m.account}.Label())
		}
	}
	return nil
}

func saveObjects(ctx context.Context, tx pgx.Tx, account string, seen []SeenObjects, linkKeys []string,
	linkOf func(string) (ObjectLink, bool)) error {
	src := newSeenSource(seen)
	src.linkKeys, src.account, src.linkOf = linkKeys, account, linkOf
	if src.n == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `CREATE TEMP TABLE mirror_objects_in (LIKE reconcile.provider_objects) ON COMMIT DROP`); err != nil {
		return fmt.Errorf("objects: %w", err)
	}
	cols := []string{"account", "id", "kind", "amount", "currency", "status", "raw_status", "amount_refunded", "target",
		"payment_intent", "charge", "customer", "metadata", "created", "seen_at", "linked_to", "names_from"}
	if err := copyBinary(ctx, tx, pgx.Identifier{"mirror_objects_in"}, cols, src.appendRow); err != nil {
		return fmt.Errorf("objects: copy: %w", err)
	}
	// The planner sizes the unanalysed batch by its pages: a handful of
	// changes is joined by index, a first pass's million by hash. Each id
	// is in the batch once (seenSource keeps the account seen last), and
	// only the pass holding the run lock saves: an update of
	// the rows the mirror holds and an insert of the others do what ON
	// CONFLICT would, without its speculative insertion per row (five
	// times slower for a first pass's million rows). An account older
	// than the mirror's (an event before a listing) does not undo it.
	// linked_to is '' in the batch for an object the pass matched to
	// nothing and NULL for one it did not match (the mirror's stays, and
	// its names_from with it). The link is the pass's conclusion, kept
	// even where the mirror saw the object later than the pass did (a
	// pass minutes before retrieved it): the next pass reaches
	// obligations by it. The object's state is the later seen.
	_, err := tx.Exec(ctx, `UPDATE reconcile.provider_objects p SET `+laterSeen+`,
			linked_to = CASE WHEN i.linked_to IS NULL THEN p.linked_to ELSE nullif(i.linked_to, '') END,
			names_from = CASE WHEN i.linked_to IS NULL THEN p.names_from ELSE i.names_from END
		FROM mirror_objects_in i WHERE p.account = i.account AND p.id = i.id AND (i.seen_at >= p.seen_at OR i.linked_to IS NOT NULL)`)
	if err != nil {
		return fmt.Errorf("objects: update: %w", err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO reconcile.provider_objects (account, `+mirrorObjectColumns+`, linked_to, names_from)
		SELECT account, `+mirrorObjectColumns+`, nullif(linked_to, ''), names_from FROM mirror_objects_in i
		WHERE NOT EXISTS (SELECT 1 FROM reconcile.provider_objects p WHERE p.account = i.account AND p.id = i.id)`)
	if err != nil {
		return fmt.Errorf("objects: insert: %w", err)
	}
	return nil
}

// laterSeen sets each of a mirrored object's columns (but its id) to the
// batch's (i) where the batch saw it at or after the mirror (p), and
// keeps the mirror's where it saw it later.
var laterSeen = func() string {
	var sets []string
	for _, c := range strings.Split(mirrorObjectColumns, ",") {
		if c = strings.TrimSpace(c); c != "id" {
			sets = append(sets, fmt.Sprintf("%s = CASE WHEN i.seen_at >= p.seen_at THEN i.%[1]s ELSE p.%[1]s END", c))
		}
	}
	return strings.Join(sets, ", ")
}()

// saveAbsent records that the provider had no object of each of ids at
// now.
func saveAbsent(ctx context.Context, tx pgx.Tx, account string, ids []string, now time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `INSERT INTO reconcile.provider_absent (account, id, seen_at)
		SELECT $1, id, $3 FROM unnest($2::text[]) AS a(id)
		ON CONFLICT (account, id) DO UPDATE SET seen_at = greatest(reconcile.provider_absent.seen_at, EXCLUDED.seen_at)`,
		account, sortedSet(ids), now)
	if err != nil {
		return fmt.Errorf("absent: %w", err)
	}
	return nil
}

// Absent returns which of ids the provider answered, at or after since,
// it has no object of (MirrorUpdate.Absent) and the mirror holds no
// object of since, sorted: a 404 is evidence of absence, and Stripe never
// gives an id to an object later (docs/design.md, "Incremental
// matching").
func (m *Mirror) Absent(ctx context.Context, ids []string, since time.Time) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := m.pool.Query(ctx, `SELECT a.id FROM reconcile.provider_absent a
		WHERE a.account = $1 AND a.id = ANY($2::text[]) AND a.seen_at >= $3
			AND NOT EXISTS (SELECT 1 FROM reconcile.provider_objects p WHERE p.account = a.account AND p.id = a.id)`,
		m.account, ids, since)
	if err != nil {
		return nil, fmt.Errorf("read absent ids: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read absent ids: %w", err)
	}
	slices.Sort(out)
	return out, nil
}

// sortedSet is ids sorted, each once (a copy).
func sortedSet(ids []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(ids)))
}

func saveKeys(ctx context.Context, tx pgx.Tx, account string, keys []reconcile.KeyEvidence) error {
	if len(keys) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `CREATE TEMP TABLE mirror_keys_in (LIKE reconcile.provider_keys) ON COMMIT DROP`); err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	i := 0
	err := copyBinary(ctx, tx, pgx.Identifier{"mirror_keys_in"},
		[]string{"account", "object_id", "key", "object_kind", "event_id", "event_type", "created", "request_id"},
		func(b []byte) ([]byte, bool, error) {
			if i == len(keys) {
				return b, false, nil
			}
			k := &keys[i]
			i++
			b = appendFields(b, 8)
			b = appendText(b, account)
			b = appendText(b, k.ObjectID)
			b = appendText(b, k.Key)
			b = appendText(b, string(k.ObjectKind))
			b = appendText(b, k.EventID)
			b = appendText(b, k.EventType)
			b = appendTimestamptz(b, k.Created.Time())
			return appendTextOrNull(b, k.RequestID), true, nil
		})
	if err != nil {
		return fmt.Errorf("keys: copy: %w", err)
	}
	// A listing's keys are one per object and key (the reader keeps the
	// earliest event of each), so the batch inserts each once; the mirror
	// keeps the earliest of all. Saves of one account take turns (Save).
	_, err = tx.Exec(ctx, `UPDATE reconcile.provider_keys p SET object_kind = i.object_kind, event_id = i.event_id,
			event_type = i.event_type, created = i.created, request_id = i.request_id
		FROM mirror_keys_in i WHERE p.account = i.account AND p.object_id = i.object_id AND p.key = i.key
			AND (i.created, i.event_id) < (p.created, p.event_id)`)
	if err != nil {
		return fmt.Errorf("keys: update: %w", err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO reconcile.provider_keys (account, object_id, key, object_kind, event_id, event_type, created, request_id)
		SELECT account, object_id, key, object_kind, event_id, event_type, created, request_id FROM mirror_keys_in i
		WHERE NOT EXISTS (SELECT 1 FROM reconcile.provider_keys p
			WHERE p.account = i.account AND p.object_id = i.object_id AND p.key = i.key)`)
	if err != nil {
		return fmt.Errorf("keys: insert: %w", err)
	}
	return nil
}

func saveCursors(ctx context.Context, tx pgx.Tx, account string, u MirrorUpdate) error {
	set := func(name string, w reconcile.Window) error {
		_, err := tx.Exec(ctx, `INSERT INTO reconcile.sync_cursors (account, name, complete_from, complete_to, run_id, updated_at)
			VALUES ($6, $1, $2, $3, $4, $5)
			ON CONFLICT (account, name) DO UPDATE SET complete_from = EXCLUDED.complete_from, complete_to = EXCLUDED.complete_to,
				run_id = EXCLUDED.run_id, updated_at = EXCLUDED.updated_at`,
			name, w.From, w.To, u.RunID, u.Now, account)
		if err != nil {
			return fmt.Errorf("cursor %s: %w", name, err)
		}
		return nil
	}
	kinds := make([]reconcile.ObjectKind, 0, len(u.Cursors.Objects))
	for k := range u.Cursors.Objects {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		switch k {
		case reconcile.Charge, reconcile.Refund, reconcile.PaymentIntent:
		default:
			return fmt.Errorf("cursor %q: not an object kind", k)
		}
		if w := u.Cursors.Objects[k]; w.Valid() {
			if err := set(string(k), w); err != nil {
				return err
			}
		}
	}
	for _, c := range []struct {
		name string
		w    reconcile.Window
	}{{cursorKeys, u.Cursors.Keys}, {cursorChanges, u.Cursors.Changes}} {
		if !c.w.To.IsZero() && !c.w.To.Before(c.w.From) {
			if err := set(c.name, c.w); err != nil {
				return err
			}
		}
	}
	return nil
}

// seenSource feeds COPY the objects of every group, each id once (the
// account seen last), without copying them into rows first.
type seenSource struct {
	seen []SeenObjects
	n    int
	g, i int
	// skip marks, per group, the objects another group has a later
	// account of. The largest group (a listing) holds each id once; only
	// the small ones (changes, retrievals) are indexed.
	skip [][]bool
	// linkKeys are the metadata keys stored exact (MirrorUpdate.LinkKeys).
	linkKeys []string
	// account is the account every row is saved under (the Mirror's).
	account string
	// linkOf, when set, gives a matched object's link (MatchSave.LinkOf).
	linkOf func(string) (ObjectLink, bool)
}

func newSeenSource(seen []SeenObjects) *seenSource {
	s := &seenSource{seen: seen, i: -1, skip: make([][]bool, len(seen))}
	largest := -1
	for g, grp := range seen {
		s.n += len(grp.Objects)
		if largest < 0 || len(grp.Objects) > len(seen[largest].Objects) {
			largest = g
		}
	}
	type at struct{ g, i int }
	best := map[string]at{}
	for g, grp := range seen {
		s.skip[g] = make([]bool, len(grp.Objects))
		if g == largest {
			continue
		}
		for i, o := range grp.Objects {
			if b, ok := best[o.ID]; ok {
				if seen[b.g].At.After(grp.At) {
					s.skip[g][i] = true
					continue
				}
				s.skip[b.g][b.i] = true
			}
			best[o.ID] = at{g, i}
		}
	}
	if largest >= 0 && len(best) > 0 {
		grp := seen[largest]
		for i, o := range grp.Objects {
			if b, ok := best[o.ID]; ok {
				if seen[b.g].At.After(grp.At) {
					s.skip[largest][i] = true
				} else {
					s.skip[b.g][b.i] = true
				}
			}
		}
	}
	return s
}

// appendRow appends the next object not skipped as a binary COPY row
// (copyBinary); false when none is left.
func (s *seenSource) appendRow(b []byte) ([]byte, bool, error) {
	for {
		if s.g >= len(s.seen) {
			return b, false, nil
		}
		if s.i+1 < len(s.seen[s.g].Objects) {
			s.i++
			if !s.skip[s.g][s.i] {
				break
			}
			continue
		}
		s.g, s.i = s.g+1, -1
	}
	g := &s.seen[s.g]
	o := &g.Objects[s.i]
	b = appendFields(b, 17)
	b = appendText(b, s.account)
	b = appendText(b, o.ID)
	b = appendText(b, string(o.Kind))
	b = appendInt8(b, o.Money.Amount)
	b = appendText(b, o.Money.Currency)
	b = appendText(b, string(o.Status))
	b = appendText(b, o.RawStatus)
	b = appendInt8(b, o.AmountRefunded)
	b = appendTextOrNull(b, o.Target)
	b = appendTextOrNull(b, o.PaymentIntent)
	b = appendTextOrNull(b, o.Charge)
	b = appendTextOrNull(b, o.Customer)
	if len(o.Metadata) > 0 {
		// No card number is kept readable at rest: masked on the way in,
		// but never the values linking reads (docs/design.md, "Untrusted
		// text").
		doc, err := json.Marshal(redact.Metadata(o.Metadata, s.linkKeys...))
		if err != nil {
			return b, false, fmt.Errorf("object %q: metadata: %w", o.ID, err)
		}
		b = appendJSONB(b, doc)
	} else {
		b = appendNull(b)
	}
	b = appendTimestamptz(b, o.Created.Time())
	b = appendTimestamptz(b, g.At)
	// '' for an object the pass matched to nothing, NULL for one it did
	// not match (saveObjects).
	if s.linkOf != nil {
		if l, ok := s.linkOf(o.ID); ok {
			b = appendText(b, l.ObligationID)
			if l.NamesFrom.IsZero() {
				return appendNull(b), true, nil
			}
			return appendTimestamptz(b, l.NamesFrom), true, nil
		}
	}
	return appendNull(appendNull(b)), true, nil
}

// mirrorText scans a text column straight from pgx's buffer, NULL as "";
// with intern set, equal values share one string.
type mirrorText struct {
	s      string
	intern map[string]string
}

func newInterned() mirrorText { return mirrorText{intern: make(map[string]string, 8)} }

// ScanBytes implements pgtype.BytesScanner. b is pgx's buffer, reused
// for the next row: it is copied, or looked up without a copy.
func (t *mirrorText) ScanBytes(b []byte) error {
	if t.intern == nil {
		t.s = string(b)
		return nil
	}
	if v, ok := t.intern[string(b)]; ok {
		t.s = v
		return nil
	}
	t.s = string(b)
	if len(t.intern) < 256 {
		t.intern[t.s] = t.s
	}
	return nil
}

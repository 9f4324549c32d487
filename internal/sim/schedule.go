package sim

import (
	"time"

	"reconcile"
	"reconcile/internal/slacktest"
	"reconcile/internal/stripesim"
)

// lookback is the window of an ordinary pass, as `reconcile run --since 72h`.
const lookback = 72 * time.Hour

// reconcile runs one reconciler step of the history: a pass, a pass and
// its rerun, a dry run, two passes at once, or a pass killed at a step
// boundary and restarted.
func (w *world) reconcile() error {
	if err := w.copiedAnswer(); err != nil {
		return err
	}
	if err := w.refundOfOpen(); err != nil {
		return err
	}
	switch w.weighted(40, 10, 8, 8, 7, 22, 10, 8) {
	case 0: // an ordinary pass, sometimes rerun at once
		pc, err := w.runSomePass(w.drawPlan(false))
		if err != nil {
			return err
		}
		if w.chance(0.25) {
			return w.rerun(pc)
		}
	case 1: // an incident: a narrow window, maybe in the past
		plan := w.drawPlan(false)
		now := w.clock.Now()
		to := now.Add(-time.Duration(w.rng.IntN(3)*w.rng.IntN(1200)) * time.Second)
		plan.window = reconcile.Window{From: to.Add(-time.Duration(1800+w.rng.IntN(12*3600)) * time.Second), To: to}
		_, err := w.runPass(plan)
		return err
	case 2:
		plan := w.drawPlan(false)
		plan.dryRun = true
		plan.interleave = false
		_, err := w.runPass(plan)
		return err
	case 3, 4:
		wait := w.chance(0.5)
		plans := []passPlan{w.drawPlan(wait), w.drawPlan(false)}
		plans[1].window = plans[0].window
		plans[0].interleave, plans[1].interleave = false, false
		return w.runPair(plans, wait)
	case 5: // killed at a step boundary, then restarted
		plan := w.drawPlan(true)
		if _, err := w.runPass(plan); err != nil {
			return err
		}
		if w.chance(0.5) {
			w.clock.Advance(time.Duration(w.rng.IntN(60)) * time.Second)
		}
		restart := w.drawPlan(false)
		pc, err := w.runSomePass(restart)
		if err != nil {
			return err
		}
		if w.chance(0.3) {
			return w.rerun(pc)
		}
	case 6: // a worker races the pass: give the pass something to mark first
		if err := w.lostAnswer(); err != nil {
			return err
		}
		// A pass sees what was created before its window's end, a second
		// at least before it started.
		w.clock.Advance(time.Duration(1+w.rng.IntN(120)) * time.Second)
		plan := w.drawPlan(false)
		plan.interleave = true
		_, err := w.runPass(plan)
		return err
	case 7: // the provider settles what a pass saw pending, before the next
		if _, err := w.runPass(w.drawPlan(false)); err != nil {
			return err
		}
		w.clock.Advance(time.Duration(60+w.rng.IntN(1800)) * time.Second)
		if err := w.settlePending(); err != nil {
			return err
		}
		w.clock.Advance(time.Duration(w.rng.IntN(600)) * time.Second)
		_, err := w.runPass(w.drawPlan(false))
		return err
	}
	return nil
}

// runSomePass runs plan's pass in one process or, in some histories with
// a mirror, as jobs (runJobPass), drawn apart from the history's own
// choices so that a history with no pass as jobs replays as before.
func (w *world) runSomePass(plan passPlan) (*passCtl, error) {
	// After a pass as jobs left running, the next is run as jobs too: its
	// enqueue must fail the other (store.BeginPass).
	if w.mirror && (w.jobsRand().Float64() < 0.2 || w.stuckRun != "") {
		return w.runJobPass(plan)
	}
	return w.runPass(plan)
}

// drawPlan draws a pass's window and faults; kill says to draw a kill at
// a step boundary too.
func (w *world) drawPlan(kill bool) passPlan {
	p := w.quiet()
	if w.chance(0.5) {
		f := stripesim.Faults{Seed: w.rng.Uint64()}
		for range 1 + w.rng.IntN(2) {
			switch w.rng.IntN(7) {
			case 6:
				// 200s in a broken shape: now and then (retried past) or on
				// every request to one list (the pass must fail).
				shapes := []stripesim.Shape{stripesim.ShapeEmpty, stripesim.ShapeNoData, stripesim.ShapeNullData,
					stripesim.ShapeNoHasMore, stripesim.ShapeNotList, stripesim.ShapeTruncated,
					stripesim.Without("amount"), stripesim.Without("currency"), stripesim.Without("status"),
					stripesim.Without("created"), stripesim.Without("id")}
				f.Malformed = shapes[w.rng.IntN(len(shapes))]
				f.MalformedList = []string{"", stripesim.ListEvents, stripesim.ListCharges, stripesim.ListRefunds}[w.rng.IntN(4)]
				if w.chance(0.6) {
					f.MalformedEvery = 2 + w.rng.IntN(3)
				}
			case 5:
				// One timeout the reader's retry gets past, or a request that
				// times out on every retry and fails the pass.
				n, k := 1+w.rng.IntN(6), 1
				if w.chance(0.4) {
					k = 4 // MaxRetries + 1
				}
				p.stripeTimeout = map[int]bool{}
				for i := range k {
					p.stripeTimeout[n+i] = true
				}
			case 0:
				f.RateLimitP = 0.05 + 0.3*w.rng.Float64()
			case 1:
				if f.FailList == "" {
					f.ServerErrorP = 0.05 + 0.25*w.rng.Float64()
				}
			case 2:
				f.DropP = 0.05 + 0.25*w.rng.Float64()
			case 3:
				if f.ServerErrorP == 0 {
					f.FailList = []string{stripesim.ListEvents, stripesim.ListCharges, stripesim.ListRefunds, stripesim.ListPaymentIntents}[w.rng.IntN(4)]
					f.FailListAfter = w.rng.IntN(2)
				}
			case 4:
				p.retrieveFail = true
			}
		}
		p.stripe = f
	}
	if w.chance(0.6) {
		for range 1 + w.rng.IntN(2) {
			switch w.weighted(1, 1, 2, 1, 1, 2, 1) {
			case 0:
				p.slack.RateLimit, p.slack.RetryAfter = 1+w.rng.IntN(3), 1
			case 1:
				p.slack.RateLimit, p.slack.RetryAfter = 1+w.rng.IntN(2), 300
			case 2:
				p.slack.ServerErr = 1 + w.rng.IntN(4)
			case 3:
				p.slack.Down = true
			case 4:
				p.slack.BadAuth = true
			case 5:
				p.loseResponse = map[int]bool{w.slackIndex(): true}
			case 6:
				p.loseRequest = map[int]bool{w.slackIndex(): true}
			}
		}
	}
	if kill {
		switch w.weighted(1, 1, 2) {
		case 0:
			p.killAfterPage = 1 + w.rng.IntN(5)
		case 1:
			p.killAfterApply = true
		default:
			p.killAfterSend = w.slackIndex()
		}
	}
	if w.chance(0.1) {
		p.interleave = true
	}
	if w.chance(0.1) {
		p.full = true
	}
	return p
}

// slackIndex picks which Slack request (or record of one) of a pass a
// fault meets: mostly the first, since many passes send one or two.
func (w *world) slackIndex() int {
	if w.chance(0.6) {
		return 1
	}
	return 2 + w.rng.IntN(2)
}

// quiet is a plan without faults over the ordinary window.
func (w *world) quiet() passPlan {
	now := w.clock.Now()
	return passPlan{window: reconcile.Window{From: now.Add(-lookback), To: now}}
}

// rerun runs the same pass again at once, with nothing new in the world
// and no faults: it must change nothing and send nothing new (I6).
func (w *world) rerun(first *passCtl) error {
	plan := w.quiet()
	plan.window = first.plan.window
	pc, err := w.runPass(plan)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// Only a rerun of a pass that read all there was and whose rows no
	// worker changed meanwhile has nothing new to see.
	if first.applied == nil || pc.applied == nil || len(first.failed) > 0 || first.interleaved != "" {
		return nil
	}
	a := pc.applied
	if len(a.Transitions) > 0 || a.New+a.Changed+a.Resolved+a.Repeated > 0 || a.Alerts > 0 {
		w.violate("I6", pc.n, "a rerun with nothing new changed something: %d transitions, %d new, %d changed, %d resolved, %d repeated findings, %d alerts queued",
			len(a.Transitions), a.New, a.Changed, a.Resolved, a.Repeated, a.Alerts)
	}
	for id, r := range w.obs.rows {
		if b, ok := pc.before.outbox[id]; ok && b.sent && r.accepted > 0 && w.sentIn(pc, id) {
			w.violate("I6", pc.n, "a rerun sent outbox row %d again, which was sent before", id)
		}
	}
	return nil
}

// sentIn reports whether pass pc's drain got row id as due.
func (w *world) sentIn(pc *passCtl, id int64) bool {
	for _, m := range w.obs.planOf[pc.n] {
		for _, a := range m.AlertIDs {
			if a == id {
				return true
			}
		}
	}
	return false
}

// quiesce lets the history settle: time passes beyond every retry delay,
// faults stop, and passes run until the outbox is empty; then every
// notice must have reached Slack exactly once, or once more marked as a
// possible repeat after an outcome the sender could not know (I3), and a
// last rerun must change nothing (I6).
func (w *world) quiesce() error {
	w.slack.SetFaults(slacktest.Faults{})
	w.clock.Advance(3 * time.Hour)
	w.tracef("quiesce")
	if w.stuckRun != "" {
		// A pass as jobs left running is failed by the next enqueued.
		if _, err := w.runJobPass(w.quiet()); err != nil {
			return err
		}
	}
	var last *passCtl
	for range 3 {
		pc, err := w.runPass(w.quiet())
		if err != nil {
			return err
		}
		last = pc
		var unsent int
		if err := w.env.Pool.QueryRow(w.ctx, `SELECT count(*) FROM reconcile.outbox WHERE sent_at IS NULL`).Scan(&unsent); err != nil {
			return err
		}
		if unsent == 0 {
			break
		}
	}
	if w.chance(0.3) {
		if err := w.rerun(last); err != nil {
			return err
		}
	}
	final, err := w.snapshot(w.ctx)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, r := range final.outbox {
		l := w.obs.row(id)
		switch {
		case !r.sent || l.accepted == 0:
			w.violate("I3", 0, "outbox row %d (%s %s) was never delivered (sent=%t, accepted %d times)", id, r.event, r.fingerprint, r.sent, l.accepted)
		case l.unmarked > 0:
			w.violate("I3", 0, "outbox row %d (%s) reached Slack %d times, %d of the extra copies not marked as a possible repeat (%d unknown outcomes, %d of them the process killed after Slack accepted)",
				id, r.event, l.accepted, l.unmarked, l.unknown, l.killed)
		case l.accepted-1 > l.unknown:
			w.violate("I3", 0, "outbox row %d (%s) reached Slack %d times after only %d unknown outcomes", id, r.event, l.accepted, l.unknown)
		}
	}
	return nil
}

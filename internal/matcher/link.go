package matcher

import "reconcile"

// Linking (docs/design.md, "Linking"). A provider object links to an
// obligation by, in order of priority: the obligation's provider_id (an
// intent's id stands for its charges, a charge's for its intent); the
// idempotency key of the request that created it, which only events tell;
// its metadata's obligation id; its metadata's idempotency key. A charge
// obligation takes charges and payment intents, a refund obligation
// refunds. Priority only names the route a link is recorded with: a
// movement that reaches two obligations, by whatever routes, is a conflict
// for each.

// Link routes as small integers, in priority order, so that "keep the
// highest-priority route" is a min.
const (
	routeNone uint8 = iota
	routeProviderID
	routeKey
	routeMetaID
	routeMetaKey
)

func routeName(r uint8) reconcile.Route {
	switch r {
	case routeProviderID:
		return reconcile.RouteProviderID
	case routeKey:
		return reconcile.RouteIdempotencyKey
	case routeMetaID:
		return reconcile.RouteMetadataID
	case routeMetaKey:
		return reconcile.RouteMetadataKey
	}
	return ""
}

// class is what a movement or an obligation is, for linking: a charge
// obligation takes charges and intents, a refund obligation refunds.
type class uint8

const (
	clsNone class = iota // an unknown kind: links to nothing
	clsCharge
	clsRefund
)

func kindClass(k reconcile.ObjectKind) class {
	switch k {
	case reconcile.Charge, reconcile.PaymentIntent:
		return clsCharge
	case reconcile.Refund:
		return clsRefund
	}
	return clsNone
}

// mlink is one obligation a movement reaches, by its best route.
type mlink struct {
	obl   int32
	route uint8
}

// linkAll links movements to obligations by every route. Priority decides
// only the route a link is recorded with: an object that reaches two
// obligations by different routes is a conflict, never a silent pick.
func (m *matcher) linkAll() {
	for i := range m.nObls() {
		o := m.obl(i)
		if o.ProviderID != "" {
			k, mv := m.objectOf(o.ProviderID)
			m.names(k, i)
			if mv >= 0 {
				m.addLink(mv, i, routeProviderID)
			}
		}
		if o.TargetID != "" && m.mayReach(o) {
			m.names(m.objByID(o.TargetID), i) // names only: a refund's target links by its refunds
		}
	}
	objs := m.in.Objects
	at := 0 // input position of the object the last key named
	for k := range m.in.Keys {
		ke := &m.in.Keys[k]
		if ke.Key == "" {
			continue
		}
		// The sources sort keys as they sort objects (by kind, creation
		// and id), so the object a key names is most often the one the
		// last key named or the next: two comparisons there save a lookup
		// by hash, which misses the cache.
		obj, mv := int32(-1), int32(-1)
		switch {
		case at < len(objs) && objs[at].ID == ke.ObjectID:
			obj = m.objOf(at)
		case at+1 < len(objs) && objs[at+1].ID == ke.ObjectID:
			at++
			obj = m.objOf(at)
		default:
			if obj = m.objByID(ke.ObjectID); obj >= 0 {
				at = m.inputOf(obj)
			} else {
				mv = m.absentMov(ke.ObjectID)
			}
		}
		if obj >= 0 {
			mv = m.objMov[obj]
		}
		if mv < 0 {
			continue
		}
		m.linkKey(mv, obj, ke.Key, routeKey)
	}
	idKey, keyKey := m.opts.MetadataObligationID, m.opts.MetadataIdempotencyKey
	for k := range m.nObjs() {
		p := m.obj(k)
		if len(p.Metadata) == 0 {
			continue
		}
		mv := m.objMov[k]
		if idKey != "" {
			if v := p.Metadata[idKey]; v != "" {
				if o := m.oblByID(v); o >= 0 {
					m.names(k, o)
					m.addLink(mv, o, routeMetaID)
				}
			}
		}
		if keyKey != "" {
			if v := p.Metadata[keyKey]; v != "" {
				m.linkKey(mv, k, v, routeMetaKey)
			}
		}
	}
}

// linkKey links movement mv to the obligations holding key, which object
// obj (-1: none, an intent only its charges named) names.
func (m *matcher) linkKey(mv, obj int32, key string, route uint8) {
	o := m.keyIdx.find(key, func(i int32) string { return m.obl(i).IdempotencyKey })
	if o < 0 {
		return
	}
	m.names(obj, o)
	m.addLink(mv, o, route)
	for _, o := range m.dupKeys[key] {
		m.names(obj, o)
		m.addLink(mv, o, route)
	}
}

// addLink records that movement mv reaches obligation o by route r, if the
// kinds fit: a charge obligation takes charges and intents, a refund
// obligation refunds. (A refund's request also emits charge.refunded with
// its key about the charge; the kinds keep that from linking the charge.)
func (m *matcher) addLink(mv, o int32, r uint8) {
	v := &m.movs[mv]
	if v.class == clsNone || m.oblCls[o] != v.class {
		return
	}
	switch {
	case v.link.obl < 0:
		v.link = mlink{o, r}
	case v.link.obl == o:
		v.link.route = min(v.link.route, r)
	default:
		if m.more == nil {
			m.more = map[int32][]mlink{}
		}
		more := m.more[mv]
		for k := range more {
			if more[k].obl == o {
				more[k].route = min(more[k].route, r)
				return
			}
		}
		m.more[mv] = append(more, mlink{o, r})
		v.conflict = true
	}
}

// Offline checks of rendered Kubernetes objects: each object is validated
// against its API schema (kubernetes-models, and the prometheus-operator and
// cert-manager CRD models), and strictly: a field the schema does not know
// (a typo such as `readinesProbe`, which the API server would drop or refuse)
// is an error too. The models' validators read every property they know by
// name, so the object is validated through a Proxy that records which keys
// were read; an object key never read, in an object whose keys were never
// enumerated as a map, is unknown.
const MODULES = {
  v1: 'kubernetes-models/v1',
  'apps/v1': 'kubernetes-models/apps/v1',
  'batch/v1': 'kubernetes-models/batch/v1',
  'policy/v1': 'kubernetes-models/policy/v1',
  'autoscaling/v2': 'kubernetes-models/autoscaling/v2',
  'networking.k8s.io/v1': 'kubernetes-models/networking.k8s.io/v1',
  'monitoring.coreos.com/v1': '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1',
  'cert-manager.io/v1': '@kubernetes-models/cert-manager/cert-manager.io/v1',
};

export function makeValidator(require) {
  const cache = new Map();
  function modelFor(apiVersion, kind) {
    const mod = MODULES[apiVersion];
    if (!mod) return null;
    if (!cache.has(mod)) cache.set(mod, require(mod));
    return cache.get(mod)[kind] || null;
  }

  // Returns a list of problems ([] when the object is valid).
  return function validate(obj) {
    const where = `${obj?.kind}/${obj?.metadata?.name}`;
    const Model = obj && modelFor(obj.apiVersion, obj.kind);
    if (!Model) return [`${where}: no schema for ${obj?.apiVersion} ${obj?.kind}`];
    const seen = [];
    const wrap = (o, p) => {
      if (o === null || typeof o !== 'object') return o;
      const rec = { p, o, keys: new Set(), enumerated: false };
      seen.push(rec);
      const kids = new Map();
      return new Proxy(o, {
        get(t, k) {
          const v = t[k];
          if (typeof k !== 'string') return v;
          rec.keys.add(k);
          if (!v || typeof v !== 'object') return v;
          if (!kids.has(k)) kids.set(k, wrap(v, `${p}/${k}`));
          return kids.get(k);
        },
        has(t, k) { rec.keys.add(k); return k in t; },
        ownKeys(t) { rec.enumerated = true; return Reflect.ownKeys(t); },
      });
    };
    const model = new Model(structuredClone(obj));
    try {
      Model.prototype.validate.call(wrap(model, ''));
    } catch (e) {
      return [`${where}: ${e.message}`];
    }
    const problems = [];
    for (const r of seen) {
      if (Array.isArray(r.o) || r.enumerated) continue;
      for (const k of Object.keys(r.o))
        if (!r.keys.has(k)) problems.push(`${where}: unknown field ${r.p}/${k}`);
    }
    return problems;
  };
}

// The pod template of a workload (Deployment, StatefulSet, Job), or null.
export function podTemplate(obj) {
  return ['Deployment', 'StatefulSet', 'Job'].includes(obj.kind) ? obj.spec.template : null;
}

// Does a label selector (matchLabels only, as the chart writes them) select these labels?
export function selects(matchLabels, labels) {
  return Object.entries(matchLabels || {}).every(([k, v]) => labels?.[k] === v);
}

// A CPU quantity ("2", "500m", "1.5") in cores.
export function cpuCores(q) {
  const s = String(q);
  return s.endsWith('m') ? Number(s.slice(0, -1)) / 1000 : Number(s);
}

// Validates the custom resources of rendered manifests against the schemas that npm packages publish
// (@kubernetes-models/keda: ScaledObject, TriggerAuthentication; @kubernetes-models/prometheus-operator:
// ServiceMonitor). Reads a JSON array of objects on stdin; prints one line per object; exit 1 on any error.
// KubeRay's RayService has no such package (npm or PyPI): it is reported as "unvalidated".
// Usage: node validate.mjs <node_modules folder> < objects.json  (make deploy-tools installs the
// packages into .cache/crd-validators/node_modules).
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.argv[2];
const load = (path) => import(pathToFileURL(join(modules, path)).href);
const { ScaledObject } = await load("@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject.js");
const { TriggerAuthentication } = await load("@kubernetes-models/keda/keda.sh/v1alpha1/TriggerAuthentication.js");
const { ServiceMonitor } = await load("@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor.js");

const MODELS = {
  "keda.sh/v1alpha1/ScaledObject": ScaledObject,
  "keda.sh/v1alpha1/TriggerAuthentication": TriggerAuthentication,
  "monitoring.coreos.com/v1/ServiceMonitor": ServiceMonitor,
};

let input = "";
for await (const chunk of process.stdin) input += chunk;
let failed = 0;
for (const doc of JSON.parse(input)) {
  const id = `${doc.apiVersion}/${doc.kind}`;
  const name = `${id} ${doc.metadata?.name}`;
  const Model = MODELS[id];
  if (!Model) {
    console.log(`unvalidated ${name}`);
    continue;
  }
  try {
    new Model(doc).validate();
    console.log(`valid ${name}`);
  } catch (err) {
    failed += 1;
    console.log(`INVALID ${name}: ${err.message}`);
  }
}
process.exit(failed ? 1 : 0);

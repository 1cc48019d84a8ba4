/**
 * Starts the Kubernetes stand-in on its own, for local trials:
 * `npx tsx packages/standins/kubernetes/src/bin.ts [--port N] [--kubeconfig PATH]`.
 * It prints the URL and the kubeconfig path (`export KUBECONFIG=...`, then
 * `kubectl get sandboxclaims`) and runs until SIGINT or SIGTERM, when it
 * removes every container it started.
 */
import { parseArgs } from "node:util";
import { startKubernetesStandIn } from "./server.ts";

const { values } = parseArgs({
  options: { port: { type: "string", default: "0" }, kubeconfig: { type: "string" }, namespace: { type: "string" } },
});
const port = Number(values.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  process.stderr.write("--port must be a port number\n");
  process.exit(2);
}
const standIn = await startKubernetesStandIn({
  port,
  ...(values.kubeconfig ? { kubeconfigPath: values.kubeconfig } : {}),
  ...(values.namespace ? { namespace: values.namespace } : {}),
});
process.stdout.write(`${JSON.stringify({ url: standIn.url, kubeconfig: standIn.kubeconfigPath })}\n`);
const shutdown = () => {
  void standIn.close().then(() => process.exit(0));
};
process.once("SIGINT", shutdown);
process.once("SIGTERM", shutdown);

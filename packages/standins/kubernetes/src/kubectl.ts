/**
 * Where Debian's kubectl (`kubernetes-client`) is: /usr/bin/kubectl when the
 * package is installed, or the copy scripts/provision.sh unpacks under
 * /var/lib/openma when another package (the Cloud SDK's kubectl) already owns
 * /usr/bin/kubectl. Tests use it as a second client independent of
 * @kubernetes/client-node.
 */
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";

export const UNPACKED_KUBECTL = "/var/lib/openma/kubernetes-client/usr/bin/kubectl";

function installedFromDebian(): boolean {
  try {
    // biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-query's own format syntax, not a template.
    return execFileSync("dpkg-query", ["-W", "-f=${db:Status-Status}", "kubernetes-client"], { encoding: "utf8" }) === "installed";
  } catch {
    return false;
  }
}

export function debianKubectl(): string {
  if (existsSync(UNPACKED_KUBECTL)) return UNPACKED_KUBECTL;
  if (installedFromDebian()) return "/usr/bin/kubectl";
  throw new Error("Debian's kubectl is missing: run `npm run provision` (it installs kubernetes-client)");
}

/**
 * A certificate authority per sandbox, for intercepting HTTPS to the hosts
 * whose requests carry a credential. The sandbox trusts its certificate; its
 * key stays in the gateway's memory and is never written anywhere. Leaf
 * certificates are issued per host on first use and cached.
 *
 * Keys come from node:crypto (native, fast); node-forge only builds and
 * signs the X.509 structures, which node:crypto cannot.
 */
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { isIP } from "node:net";
import forge from "node-forge";

export interface IssuedCertificate {
  keyPem: string;
  certPem: string;
}

const DAY_MS = 24 * 60 * 60 * 1000;

function rsaKeyPair(): { privateKey: forge.pki.rsa.PrivateKey; publicKey: forge.pki.rsa.PublicKey; keyPem: string } {
  const { privateKey, publicKey } = generateKeyPairSync("rsa", {
    modulusLength: 2048,
    publicKeyEncoding: { type: "spki", format: "pem" },
    privateKeyEncoding: { type: "pkcs8", format: "pem" },
  });
  return {
    privateKey: forge.pki.privateKeyFromPem(privateKey) as forge.pki.rsa.PrivateKey,
    publicKey: forge.pki.publicKeyFromPem(publicKey) as forge.pki.rsa.PublicKey,
    keyPem: privateKey,
  };
}

function serial(): string {
  // Positive (high bit clear) 128-bit serial.
  const bytes = randomBytes(16);
  bytes[0] = (bytes[0] as number) & 0x7f;
  return bytes.toString("hex");
}

export class SandboxCa {
  readonly certPem: string;
  readonly #key: forge.pki.rsa.PrivateKey;
  readonly #cert: forge.pki.Certificate;
  readonly #leafKey: ReturnType<typeof rsaKeyPair>;
  readonly #issued = new Map<string, IssuedCertificate>();

  /** `name` goes into the subject (e.g. the sandbox's runtime id), so a trust store entry says whose it is. */
  constructor(name: string, now: Date = new Date()) {
    const pair = rsaKeyPair();
    const cert = forge.pki.createCertificate();
    cert.publicKey = pair.publicKey;
    cert.serialNumber = serial();
    cert.validity.notBefore = new Date(now.getTime() - DAY_MS);
    cert.validity.notAfter = new Date(now.getTime() + 30 * DAY_MS);
    const subject = [
      { name: "commonName", value: `OpenMA sandbox egress CA ${name.slice(0, 40)}` },
      { name: "organizationName", value: "OpenMA" },
    ];
    cert.setSubject(subject);
    cert.setIssuer(subject);
    cert.setExtensions([
      { name: "basicConstraints", cA: true, critical: true, pathLenConstraint: 0 },
      { name: "keyUsage", keyCertSign: true, cRLSign: true, critical: true },
      { name: "subjectKeyIdentifier" },
    ]);
    cert.sign(pair.privateKey, forge.md.sha256.create());
    this.#key = pair.privateKey;
    this.#cert = cert;
    this.certPem = forge.pki.certificateToPem(cert);
    // One key for every leaf of this sandbox: a fresh RSA key per host would cost more than it protects.
    this.#leafKey = rsaKeyPair();
  }

  /** A certificate for `host` (a name or an IP literal), signed by this CA. */
  issue(host: string, now: Date = new Date()): IssuedCertificate {
    const known = this.#issued.get(host);
    if (known) return known;
    const cert = forge.pki.createCertificate();
    cert.publicKey = this.#leafKey.publicKey;
    cert.serialNumber = serial();
    cert.validity.notBefore = new Date(now.getTime() - DAY_MS);
    cert.validity.notAfter = new Date(now.getTime() + 7 * DAY_MS);
    cert.setSubject([{ name: "commonName", value: host.slice(0, 64) }]);
    cert.setIssuer(this.#cert.subject.attributes);
    const altName = isIP(host) ? { type: 7, ip: host } : { type: 2, value: host };
    cert.setExtensions([
      { name: "basicConstraints", cA: false },
      { name: "keyUsage", digitalSignature: true, keyEncipherment: true, critical: true },
      { name: "extKeyUsage", serverAuth: true },
      { name: "subjectAltName", altNames: [altName] },
    ]);
    cert.sign(this.#key, forge.md.sha256.create());
    const issued = { keyPem: this.#leafKey.keyPem, certPem: forge.pki.certificateToPem(cert) };
    this.#issued.set(host, issued);
    return issued;
  }
}

/**
 * SQL wiring for the host. `SqlRuntimeResourceFence` and
 * `SqlRuntimeOrphanStore` from `@openma/storage` already implement the
 * contract ports, so no adapter is needed for them; this only adds what GC
 * needs and the ports do not offer: the list of scopes that have a fence.
 */
import type { RuntimeResourceScope } from "@openma/contract";
import type { Clock } from "@openma/storage/clock";
import { SqlRuntimeResourceFence } from "@openma/storage/fence";
import { SqlRuntimeOrphanStore } from "@openma/storage/orphans";
import type { Database } from "@openma/storage/schema";
import type { Kysely } from "kysely";

/** Scopes in key order, a page at a time, so a large deployment is never loaded at once. */
export async function* sqlFenceScopes(db: Kysely<Database>, pageSize = 500): AsyncGenerator<RuntimeResourceScope> {
  let after: string | null = null;
  for (;;) {
    let query = db.selectFrom("runtime_fences").select(["scope_key", "environment_id", "session_id"]).orderBy("scope_key").limit(pageSize);
    if (after !== null) query = query.where("scope_key", ">", after);
    const rows = await query.execute();
    for (const row of rows) yield { environmentId: row.environment_id, sessionId: row.session_id };
    if (rows.length < pageSize) return;
    after = rows.at(-1)!.scope_key;
  }
}

/** The fence and orphan ports over one database, sharing the host's clock. */
export function sqlRuntimePorts(db: Kysely<Database>, clock: Clock): { fences: SqlRuntimeResourceFence; orphans: SqlRuntimeOrphanStore } {
  return { fences: new SqlRuntimeResourceFence(db, { clock }), orphans: new SqlRuntimeOrphanStore(db, { clock }) };
}

import type { FhirContext } from '../context.js';

/** Runs `work` as `ctx.admit` admits it (a turn of the project, with its deadline), or at once. */
export function admitted<T>(ctx: FhirContext, work: (ctx: FhirContext) => Promise<T>): Promise<T> {
  return ctx.admit ? ctx.admit(ctx, work) : work(ctx);
}

/** `{ deadline }` of `ctx` when it has one: what every store query of a costly read carries. */
export function deadlineOf(ctx: FhirContext): { deadline?: number } {
  return ctx.deadline === undefined ? {} : { deadline: ctx.deadline };
}

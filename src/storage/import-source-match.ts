import type { ProjectImportSource } from './record-types.js';

/** The origin and path of `text`, or undefined when it is no absolute URL. */
function originAndPath(text: string): { origin: string; path: string } | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return undefined;
  }
  return { origin: url.origin, path: url.pathname.replace(/\/+$/, '') };
}

/**
 * The registered source whose credentials a `$import` fetch of `url` uses: the one whose `url` is
 * the longest prefix of `url` at a path-segment boundary (same origin; the path is the source's
 * path, or starts with it followed by `/`). Undefined when none is, or when `url` is no absolute
 * URL. The query and fragment of `url` play no part.
 */
export function importSourceFor(
  sources: ProjectImportSource[] | undefined,
  url: string,
): ProjectImportSource | undefined {
  const target = originAndPath(url);
  if (!target) return undefined;
  let best: { source: ProjectImportSource; length: number } | undefined;
  for (const source of sources ?? []) {
    const base = originAndPath(source.url);
    if (!base || base.origin !== target.origin) continue;
    const under = target.path === base.path || target.path.startsWith(`${base.path}/`);
    if (under && (!best || base.path.length > best.length)) best = { source, length: base.path.length };
  }
  return best?.source;
}

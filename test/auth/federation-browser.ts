/**
 * A browser for the federated sign-in tests, over real HTTP: follows redirects one by one, keeps
 * cookies per host (names and values, path and expiry honoured loosely: enough for these flows),
 * and fills the development login and consent forms of `oidc-provider`.
 */

export interface Page {
  url: string;
  status: number;
  body: string;
  headers: Headers;
}

export class TestBrowser {
  readonly cookies = new Map<string, Map<string, string>>();
  /** Every URL visited, in order. */
  readonly visited: string[] = [];

  private jar(url: URL): Map<string, string> {
    let jar = this.cookies.get(url.host);
    if (!jar) this.cookies.set(url.host, (jar = new Map()));
    return jar;
  }

  private store(url: URL, headers: Headers): void {
    const jar = this.jar(url);
    for (const line of headers.getSetCookie()) {
      const [pair = '', ...attributes] = line.split(';');
      const eq = pair.indexOf('=');
      const name = pair.slice(0, eq).trim();
      const value = pair.slice(eq + 1).trim();
      const expired = attributes.some(
        (a) => /^\s*max-age=0\s*$/i.test(a) || /expires=thu, 01 jan 1970/i.test(a),
      );
      if (expired || value === '') jar.delete(name);
      else jar.set(name, value);
    }
  }

  /** One request, no redirect followed. */
  async request(url: string, init: RequestInit = {}): Promise<Page> {
    const target = new URL(url);
    this.visited.push(url);
    const cookie = [...this.jar(target)].map(([k, v]) => `${k}=${v}`).join('; ');
    const headers = new Headers(init.headers);
    if (cookie) headers.set('cookie', cookie);
    const res = await fetch(target, { ...init, headers, redirect: 'manual' });
    this.store(target, res.headers);
    return { url, status: res.status, body: await res.text(), headers: res.headers };
  }

  /** Follows redirects from `url` until a page that is not one. */
  async follow(url: string, init: RequestInit = {}): Promise<Page> {
    let page = await this.request(url, init);
    for (let hops = 0; page.status >= 300 && page.status < 400 && hops < 20; hops++) {
      const next = new URL(page.headers.get('location') ?? '', page.url).href;
      page = await this.request(next);
    }
    return page;
  }

  /** Posts a form on `page` (its first `<form action>`), then follows redirects. */
  async submit(page: Page, fields: Record<string, string>): Promise<Page> {
    const action = /<form[^>]*action="([^"]+)"/.exec(page.body)?.[1];
    if (!action) throw new Error(`no form on ${page.url}: ${page.body.slice(0, 300)}`);
    return this.follow(new URL(action.replaceAll('&amp;', '&'), page.url).href, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams(fields).toString(),
    });
  }

  /** Signs in at the provider's development pages as `login`, consenting when asked. */
  async signInAtIdp(page: Page, login: string): Promise<Page> {
    let current = page;
    for (let step = 0; step < 4 && /name="prompt"/.test(current.body); step++) {
      const prompt = /name="prompt" value="(\w+)"/.exec(current.body)?.[1];
      current =
        prompt === 'login'
          ? await this.submit(current, { prompt: 'login', login, password: 'any' })
          : await this.submit(current, { prompt: 'consent' });
    }
    return current;
  }
}

import type { AuthenticateUser } from '../../src/auth/authorize/user-sign-in.js';
import { escapeHtml } from '../../src/auth/browser/authorization-pages.js';

/**
 * A tiny `authenticateUser` for tests: it shows a form asking for a user id, which comes back to
 * the resume URL as `login_user`; the user is whoever the form names (no password: tests only).
 */
export function formSignIn(): AuthenticateUser {
  return (req, res, signIn) => {
    const login = req.query.login_user;
    if (typeof login === 'string' && login !== '' && req.query.ticket === signIn.ticket) {
      return Promise.resolve({ userId: login });
    }
    const action = signIn.resumeUrl.split('?')[0]!;
    res
      .status(200)
      .type('html')
      .send(
        `<!doctype html><form method="get" action="${escapeHtml(action)}">` +
          `<input type="hidden" name="ticket" value="${escapeHtml(signIn.ticket)}">` +
          `<input name="login_user"><button type="submit">Sign in</button></form>`,
      );
    return Promise.resolve(undefined);
  };
}

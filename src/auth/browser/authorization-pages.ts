/**
 * The pages of the authorization endpoint (SMART App Launch): consent, patient picker and error.
 * Minimal server-rendered HTML, every value escaped; a host replaces any of them (and their texts)
 * through `AuthorizationRouterOptions.pages`.
 */

/** One patient offered by the picker. */
export interface PickerPatient {
  id: string;
  /** A display name (`Given Family`), or the id when the resource has no name. */
  name: string;
  birthDate?: string;
}

/** What every interactive page of one pending authorization carries in its form. */
export interface AuthorizationForm {
  /** Where the form posts (the authorization endpoint, absolute). */
  action: string;
  /** Hidden fields the form must send back as they are (`ticket`, `csrf`). */
  hidden: Record<string, string>;
}

/** What the consent page shows. Approve posts `action=approve`, deny `action=deny`. */
export interface ConsentPage {
  form: AuthorizationForm;
  /** The app's registered name. */
  clientName: string;
  /** The scopes the app will get if the user approves. */
  scopes: string[];
  /** The signed-in user's profile (`Patient/123`). */
  fhirUser: string;
  /** The launch context patient (`Patient/123`), when the app asked for one. */
  patient?: string;
}

/**
 * What the patient picker shows (`launch/patient` for a Practitioner). Searching posts
 * `action=search` with `name`; choosing posts `action=pick` with `patient` (an id).
 */
export interface PatientPickerPage {
  form: AuthorizationForm;
  clientName: string;
  /** The name searched for, when the user searched. */
  query?: string;
  /** The patients found (at most a page). */
  patients: PickerPatient[];
}

/** What an error page shows: why the request stops here. */
export interface AuthorizationErrorPage {
  /** HTTP status of the page. */
  status: number;
  /** A stable code (`invalid_client`, `invalid_redirect_uri`, `ticket_expired`, …). */
  error: string;
  /** A sentence for the user. */
  description: string;
}

/**
 * Page renderers of the authorization endpoint: each returns a whole HTML document. Give the ones
 * to replace; the others stay the defaults.
 */
export interface AuthorizationPages {
  consent: (page: ConsentPage) => string;
  patientPicker: (page: PatientPickerPage) => string;
  error: (page: AuthorizationErrorPage) => string;
}

/** Escapes text for HTML content and attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function document(title: string, body: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<style>body{font-family:system-ui,sans-serif;max-width:36rem;margin:2rem auto;padding:0 1rem}button{margin:.25rem .5rem .25rem 0;padding:.4rem 1rem}li{margin:.2rem 0}</style>
</head><body>
${body}
</body></html>`;
}

function hiddenFields(form: AuthorizationForm): string {
  return Object.entries(form.hidden)
    .map(([name, value]) => `<input type="hidden" name="${escapeHtml(name)}" value="${escapeHtml(value)}">`)
    .join('');
}

function consent(page: ConsentPage): string {
  const scopes = page.scopes.map((s) => `<li><code>${escapeHtml(s)}</code></li>`).join('');
  return document(
    'Authorize access',
    `<h1>${escapeHtml(page.clientName)} asks for access</h1>
<p>Signed in as <strong>${escapeHtml(page.fhirUser)}</strong>.${
      page.patient ? ` Patient: <strong>${escapeHtml(page.patient)}</strong>.` : ''
    }</p>
<p>The app will be allowed:</p><ul>${scopes}</ul>
<form method="post" action="${escapeHtml(page.form.action)}">${hiddenFields(page.form)}
<button type="submit" name="action" value="approve">Allow</button>
<button type="submit" name="action" value="deny">Deny</button>
</form>`,
  );
}

function patientPicker(page: PatientPickerPage): string {
  const found = page.patients
    .map(
      (p) =>
        `<li><button type="submit" name="patient" value="${escapeHtml(p.id)}">${escapeHtml(p.name)}</button>${
          p.birthDate ? ` born ${escapeHtml(p.birthDate)}` : ''
        }</li>`,
    )
    .join('');
  const results =
    page.query === undefined
      ? ''
      : page.patients.length === 0
        ? '<p>No patient found.</p>'
        : `<form method="post" action="${escapeHtml(page.form.action)}">${hiddenFields(page.form)}<input type="hidden" name="action" value="pick"><ul>${found}</ul></form>`;
  return document(
    'Choose a patient',
    `<h1>Choose the patient for ${escapeHtml(page.clientName)}</h1>
<form method="post" action="${escapeHtml(page.form.action)}">${hiddenFields(page.form)}
<input type="hidden" name="action" value="search">
<label>Name <input name="name" value="${escapeHtml(page.query ?? '')}" autofocus></label>
<button type="submit">Search</button>
</form>
${results}`,
  );
}

function error(page: AuthorizationErrorPage): string {
  return document(
    'Authorization failed',
    `<h1>This request cannot go on</h1>
<p>${escapeHtml(page.description)}</p>
<p><small>Error: <code>${escapeHtml(page.error)}</code></small></p>`,
  );
}

/** The default pages. */
export const DEFAULT_AUTHORIZATION_PAGES: AuthorizationPages = Object.freeze({
  consent,
  patientPicker,
  error,
});

/**
 * A successful token response (RFC 6749 §5.1, SMART Backend Services "Response"; for a signed-in
 * user, SMART App Launch "Access token response" adds the refresh token, id_token and patient).
 * Every grant answers it: `client_credentials` (token-endpoint.ts) and the user grants
 * (user-grants.ts).
 */
export interface TokenResponse {
  access_token: string;
  token_type: 'bearer';
  expires_in: number;
  scope: string;
  refresh_token?: string;
  id_token?: string;
  patient?: string;
}

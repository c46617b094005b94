// The standalone server: `npm start`. Configuration from the environment (see README).
import type { AddressInfo } from 'node:net';
import { readConfig } from './config.js';
import { startStandalone } from './app.js';

const config = readConfig();
const standalone = await startStandalone(config);
const base = standalone.baseUrl;
console.log(
  `fhir-platform-kit listening on ${config.host}:${(standalone.server.address() as AddressInfo).port}`,
);
console.log(`  FHIR R4:        ${base}/fhir/R4`);
console.log(`  SCIM 2.0:       ${base}/scim/v2`);
console.log(`  Token endpoint: ${base}/oauth2/token`);
console.log(`  Data directory: ${config.dataDir}`);
if (standalone.generatedSuperAdmin) {
  console.log('');
  console.log('Super-admin client created (the secret is shown only this once; it is stored hashed):');
  console.log(`  SUPER_ADMIN_CLIENT_ID=${standalone.generatedSuperAdmin.clientId}`);
  console.log(`  SUPER_ADMIN_CLIENT_SECRET=${standalone.generatedSuperAdmin.clientSecret}`);
}

let stopping = false;
function stop(signal: string): void {
  if (stopping) return;
  stopping = true;
  console.log(`${signal}: shutting down`);
  standalone.close().then(
    () => process.exit(0),
    (error: unknown) => {
      console.error('shutdown failed', error);
      process.exit(1);
    },
  );
}
process.on('SIGTERM', () => stop('SIGTERM'));
process.on('SIGINT', () => stop('SIGINT'));

// Placeholder entry so the build has its worker entry point; the bulk export issue fills it in.
export default function exportTask(): never {
  throw new Error('export worker not implemented yet');
}

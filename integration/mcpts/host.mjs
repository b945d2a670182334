// An MCP host built on the official TypeScript SDK client
// (@modelcontextprotocol/client): it connects to outbox's /mcp over
// streamable HTTP at protocol 2026-07-28, calls one tool, and answers every
// elicitation it is shown with a decision scripted on the command line. The
// SDK's own multi round-trip driver does the rest: it hands each
// `input_required` request to the elicitation handler and retries the call
// with the answers and the server's `requestState`.
//
//   node host.mjs --url http://127.0.0.1:8080/mcp --token $TOKEN \
//     --tool charge_card --args '{"amount":5000,...}' --decision approve [--url-elicitation]
//
// --url and --token default to OUTBOX_MCP_URL and OUTBOX_TOKEN. --decision
// is approve or deny (accepted, with that decision in the form) or decline
// (the elicitation declined). URL-mode elicitations are accepted whatever
// the decision: the host "opened" the page, which decides nothing.
//
// Prints one JSON line on stdout: {"result": CallToolResult,
// "elicitations": [{mode, message, url}], "protocolVersion": "..."}; exits
// 1 with the error on stderr otherwise.
import { parseArgs } from 'node:util';

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const decisions = ['approve', 'deny', 'decline'];

function options() {
    const { values } = parseArgs({
        options: {
            url: { type: 'string', default: process.env.OUTBOX_MCP_URL },
            token: { type: 'string', default: process.env.OUTBOX_TOKEN },
            tool: { type: 'string' },
            args: { type: 'string', default: '{}' },
            decision: { type: 'string', default: 'approve' },
            reason: { type: 'string', default: '' },
            'url-elicitation': { type: 'boolean', default: false },
            name: { type: 'string', default: 'ts-sdk-host' }
        },
        strict: true
    });
    if (!values.url) throw new Error('--url (or OUTBOX_MCP_URL) is required');
    if (!values.tool) throw new Error('--tool is required');
    if (!decisions.includes(values.decision)) {
        throw new Error(`--decision must be one of ${decisions.join(', ')}, not ${JSON.stringify(values.decision)}`);
    }
    let args;
    try {
        args = JSON.parse(values.args);
    } catch (err) {
        throw new Error(`--args is not JSON: ${err.message}`);
    }
    return { ...values, args };
}

async function main() {
    const opts = options();
    // Form elicitation always; URL mode only when asked, since outbox
    // offers the console's page only to a client that declares it.
    const elicitation = opts['url-elicitation'] ? { form: {}, url: {} } : { form: {} };
    const client = new Client(
        { name: opts.name, version: '1.0.0' },
        {
            capabilities: { elicitation },
            // Pinned rather than probed: MRTR exists only in the
            // 2026-07-28 era, and a server that does not speak it should
            // fail the test, not fall back to 2025.
            versionNegotiation: { mode: { pin: '2026-07-28' } }
        }
    );
    const shown = [];
    client.setRequestHandler('elicitation/create', async request => {
        const p = request.params;
        const mode = p.mode ?? 'form';
        shown.push({ mode, message: p.message, ...(p.url !== undefined && { url: p.url }) });
        if (mode === 'url') return { action: 'accept' };
        if (opts.decision === 'decline') return { action: 'decline' };
        const content = { decision: opts.decision };
        if (opts.reason) content.reason = opts.reason;
        return { action: 'accept', content };
    });

    const headers = opts.token ? { Authorization: `Bearer ${opts.token}` } : {};
    const transport = new StreamableHTTPClientTransport(new URL(opts.url), { requestInit: { headers } });
    await client.connect(transport);
    try {
        const result = await client.callTool({ name: opts.tool, arguments: opts.args });
        process.stdout.write(
            JSON.stringify({ result, elicitations: shown, protocolVersion: client.getNegotiatedProtocolVersion() }) + '\n'
        );
    } finally {
        await client.close();
    }
}

main().catch(err => {
    process.stderr.write(`host.mjs: ${err?.stack ?? err}\n`);
    process.exit(1);
});

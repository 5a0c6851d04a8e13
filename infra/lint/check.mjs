// check.mjs parses every .bicep file under the given paths with the
// tree-sitter Bicep grammar and fails (exit 1) on a syntax error, naming
// its file, line and column. It also holds the files to two conventions
// of Azure Verified Modules: every parameter and output has a
// @description, and every resource names an API version.
//
// Usage: node check.mjs <file or directory>...
//
// The grammar checks syntax only: names, types and API versions are
// checked by the Go tests in infra/ and by nothing here.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { createRequire } from 'node:module';
import { Parser, Language } from 'web-tree-sitter';

const require = createRequire(import.meta.url);

async function newParser() {
  await Parser.init();
  const wasm = require.resolve('tree-sitter-bicep/tree-sitter-bicep.wasm');
  const parser = new Parser();
  parser.setLanguage(await Language.load(wasm));
  return parser;
}

// problems lists what is wrong with one parsed file, as "line:col: text".
function problems(tree) {
  const out = [];
  const visit = (node) => {
    const at = `${node.startPosition.row + 1}:${node.startPosition.column + 1}`;
    if (node.isMissing) {
      out.push(`${at}: syntax error: missing ${node.type}`);
      return;
    }
    if (node.type === 'ERROR') {
      out.push(`${at}: syntax error near ${JSON.stringify(node.text.slice(0, 40))}`);
      return;
    }
    if (!node.hasError) {
      conventions(node, at, out);
    }
    for (const child of node.children) {
      if (child.hasError || child.isMissing || child.type === 'ERROR' || child.childCount > 0) {
        visit(child);
      }
    }
  };
  visit(tree.rootNode);
  return out;
}

// conventions checks one declaration against the conventions above.
function conventions(node, at, out) {
  const described = () => {
    const prev = node.previousNamedSibling;
    return prev !== null && prev.type === 'decorators' &&
      prev.namedChildren.some((d) => /^(sys\.)?description\(/.test(d.text.replace(/^@/, '')));
  };
  switch (node.type) {
    case 'parameter_declaration':
    case 'output_declaration':
      if (!described()) {
        const what = node.type === 'parameter_declaration' ? 'parameter' : 'output';
        out.push(`${at}: ${what} ${node.namedChildren[0].text} has no @description`);
      }
      break;
    case 'resource_declaration': {
      const type = node.namedChildren[1];
      if (type && type.type === 'string' && !/^'[\w.]+\/[\w./]+@\d{4}-\d{2}-\d{2}(-preview)?'$/.test(type.text)) {
        out.push(`${at}: resource ${node.namedChildren[0].text} has type ${type.text}, not 'Namespace/type@yyyy-mm-dd'`);
      }
      break;
    }
  }
}

function bicepFiles(path) {
  if (statSync(path).isFile()) {
    return path.endsWith('.bicep') ? [path] : [];
  }
  return readdirSync(path).filter((n) => n !== 'node_modules').sort()
    .flatMap((n) => bicepFiles(join(path, n)));
}

// selfTest makes sure the check can fail: a broken file must give
// problems and a sound one none, or the grammar is not doing its job.
function selfTest(parser) {
  const sound = "@description('x')\nparam p string = 'a'\nresource r 'Microsoft.X/y@2024-01-01' = {\n  name: p\n}\n";
  const broken = "resource r 'Microsoft.X/y@2024-01-01' = {\n  name: 'a'\n  properties: {\n";
  const a = problems(parser.parse(sound));
  const b = problems(parser.parse(broken));
  if (a.length !== 0 || b.length === 0) {
    throw new Error(`self-test failed: sound file gave ${JSON.stringify(a)}, broken file gave ${JSON.stringify(b)}`);
  }
}

const roots = process.argv.slice(2);
if (roots.length === 0) {
  console.error('usage: node check.mjs <file or directory>...');
  process.exit(2);
}
const parser = await newParser();
selfTest(parser);
let failed = 0;
const files = roots.flatMap(bicepFiles);
for (const file of files) {
  const found = problems(parser.parse(readFileSync(file, 'utf8')));
  for (const p of found) {
    console.error(`${relative(process.cwd(), file)}:${p}`);
  }
  failed += found.length > 0 ? 1 : 0;
}
if (files.length === 0) {
  console.error(`no .bicep file under ${roots.join(' ')}`);
  process.exit(1);
}
if (failed > 0) {
  console.error(`bicep: ${failed} of ${files.length} files have problems`);
  process.exit(1);
}
console.log(`bicep: ${files.length} files parse with the tree-sitter Bicep grammar`);

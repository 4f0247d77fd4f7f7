#!/usr/bin/env python3
"""Checks that ps/ is layered one way: a file includes ps/ headers of its own folder or of a
folder below it, never of one above (or of a sibling at its level), and ps/ includes nothing of
models/ or tools/ and only the public transport headers.

  store <- job <- wire, launch <- server, worker, coordinator <- node.h / node.cc

Usage: check-ps-layers.py [ROOT]   (default: the repository holding this script). Exit 1 and one
line per arrow that points the wrong way."""
import os
import re
import sys

LEVEL = {'store': 0, 'job': 1, 'wire': 2, 'launch': 2, 'server': 3, 'worker': 3,
         'coordinator': 3, '': 4}
TRANSPORT_PUBLIC = {'transport/transport.h', 'transport/status.h', 'transport/shareable.h',
                    'transport/pool.h', 'transport/topology.h',
                    'transport/common/ring.h'}  # a container: no backend behind it
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(rel):  # 'ps/worker/worker.h' -> 'worker'; 'ps/node.h' -> ''
    parts = rel.split('/')
    return parts[1] if len(parts) > 2 else ''


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))
    problems = []
    for dirpath, _, files in os.walk(os.path.join(root, 'ps')):
        for name in files:
            if not name.endswith(('.h', '.cc')):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            here = folder_of(rel)
            if here not in LEVEL:
                problems.append(f'{rel}: folder ps/{here}/ has no level in this check')
                continue
            with open(os.path.join(root, rel)) as f:
                text = f.read()
            for inc in INCLUDE.findall(text):
                if inc.startswith('ps/'):
                    there = folder_of(inc)
                    if there not in LEVEL:
                        problems.append(f'{rel}: includes {inc} of an unknown folder')
                    elif there != here and LEVEL[there] >= LEVEL[here]:
                        problems.append(f'{rel} (ps/{here}/) includes {inc} (ps/{there}/): '
                                        'an arrow up or sideways')
                elif inc.startswith(('models/', 'tools/')):
                    problems.append(f'{rel}: includes {inc} (ps/ is below models/ and tools/)')
                elif inc.startswith('transport/') and inc not in TRANSPORT_PUBLIC:
                    problems.append(f'{rel}: includes {inc}, not a public transport header')
    for p in sorted(problems):
        print(p)
    if problems:
        return 1
    print('ps/ layering: one way')
    return 0


if __name__ == '__main__':
    sys.exit(main())

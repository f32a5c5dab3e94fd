#!/usr/bin/env python3
"""Functions over N lines outside tests (issue 33's figure): every `fn` in DIR's .rs files,
by brace matching, skipping tests.rs, *_tests.rs, anything under a tests/ directory and
everything after a file's first top-level #[cfg(test)]. Test-only modules declared
elsewhere (e.g. pki/files/powercut.rs) are counted; say so when quoting.

    python3 bench/fnlen.py src 60     # the list, longest first, then "count> 60 N"
"""
import os,re,sys
root=sys.argv[1]; lim=int(sys.argv[2]) if len(sys.argv)>2 else 60
res=[]
for dp,dn,fn in os.walk(root):
    if 'target' in dp or '/tests' in dp: continue
    for f in fn:
        if not f.endswith('.rs') or f=='tests.rs' or f.endswith('_tests.rs'): continue
        p=os.path.join(dp,f); L=open(p).read().split('\n')
        # cut at #[cfg(test)]
        cut=len(L)
        for i,l in enumerate(L):
            if l.startswith('#[cfg(test)]'): cut=i;break
        i=0
        while i<cut:
            m=re.match(r'\s*(pub(\(\w+\))?\s+)?(async\s+)?(const\s+)?fn\s+(\w+)',L[i])
            if m:
                depth=0;started=False;j=i
                while j<cut:
                    for ch in L[j]:
                        if ch=='{': depth+=1;started=True
                        elif ch=='}': depth-=1
                    if started and depth==0: break
                    if not started and L[j].rstrip().endswith(';'): break
                    j+=1
                n=j-i+1
                if started and n>lim: res.append((n,p,m.group(5)))
                i=j+1 if started else i+1
            else: i+=1
for n,p,f in sorted(res,reverse=True): print(n,p,f)
print('count>',lim,len(res))

"""/metrics read back to back and /live every 50 ms for SECONDS; prints each one's latency
quantiles. Usage: python3 measure.py BASE_URL SECONDS"""
import sys, time, threading, urllib.request
base=sys.argv[1]; secs=float(sys.argv[2])
def loop(path, out, pause):
    end=time.time()+secs
    while time.time()<end:
        t=time.perf_counter()
        with urllib.request.urlopen(base+path, timeout=30) as r: r.read()
        out.append((time.perf_counter()-t)*1000)
        if pause: time.sleep(pause)
m=[]; l=[]
a=threading.Thread(target=loop,args=("/metrics",m,0)); b=threading.Thread(target=loop,args=("/live",l,0.05))
a.start(); b.start(); a.join(); b.join()
def q(x,p): x=sorted(x); return x[min(len(x)-1,int(p*len(x)))]
print(f"/metrics n={len(m)} p50={q(m,.5):.1f}ms p99={q(m,.99):.1f}ms max={max(m):.1f}ms | /live n={len(l)} p50={q(l,.5):.2f}ms p99={q(l,.99):.2f}ms max={max(l):.2f}ms")

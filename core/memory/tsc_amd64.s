#include "textflag.h"

// func prefetchw(p unsafe.Pointer)
TEXT ·prefetchw(SB), NOSPLIT, $0-8
	CMPB ·hasPrefetchW(SB), $0
	JEQ  done
	MOVQ p+0(FP), AX
	BYTE $0x0F; BYTE $0x0D; BYTE $0x08 // PREFETCHW (AX)
done:
	RET

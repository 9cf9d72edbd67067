// A switch gcc compiles to a jump table (engine/entries).
volatile int sink[16];

int sw(int x) {
	switch (x) {
	case 0: sink[3] = 11; break;
	case 1: sink[5] += 3; break;
	case 2: sink[1] ^= 0x55; break;
	case 3: sink[7] <<= 5; break;
	case 4: sink[2] = 1234; break;
	case 5: sink[9] *= sink[9]; break;
	case 6: sink[4] = 99 - sink[0]; break;
	case 7: sink[8] += 100000; break;
	case 8: sink[6] = -sink[6]; break;
	case 9: sink[0] *= 31; break;
	default: return 0;
	}
	return sink[x];
}

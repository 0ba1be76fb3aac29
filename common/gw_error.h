/*
 * Error codes shared by every module: functions return 0 on success or one
 * of these negative values. GW_EAGAIN means "not yet": a resumable parser
 * needs more input, a non-blocking call would block.
 */
#ifndef GW_ERROR_H
#define GW_ERROR_H

#define GW_OK 0
#define GW_EAGAIN (-1)  /* need more input / would block */
#define GW_ENOMEM (-2)  /* allocation failed */
#define GW_EINVAL (-3)  /* invalid argument or input */
#define GW_ELIMIT (-4)  /* a bounded buffer would pass its ceiling */
#define GW_ECLOSED (-5) /* the peer or object is gone */
#define GW_EIO (-6)     /* system call failed (errno says why) */
#define GW_ENOTFOUND (-7)
#define GW_ERANGE (-8) /* arithmetic would overflow (money: gw_money.h) */
/* The same code as GW_ENOTFOUND, by the name the cost code uses: a thing
 * looked up (a price for a token class) is absent. */
#define GW_ENOENT GW_ENOTFOUND

const char *gw_strerror(int code);

#endif
